/* listener.c — listening sockets and accepting (listener.h). */
#define _GNU_SOURCE /* accept4 */
#include "xnet/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
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

/* ---- Handing a closing socket's queue over ----
 * A listening socket that closes resets the connections in its accept queue,
 * even when other sockets of its SO_REUSEPORT group (another copy of the
 * server, started to replace this one) could take them: measured here on
 * Linux 6.18, 64 connections queued over two sockets of a group and one
 * closed unaccepted, 31 were reset. Linux 5.14 can move them instead
 * (reuseport migration): for every group when net.ipv4.tcp_migrate_req is 1,
 * or for one group whose reuseport program was loaded as
 * BPF_SK_REUSEPORT_SELECT_OR_MIGRATE. With ours the same measure moved all 64.
 *
 * Moving what is queued is not enough: a handshake that completes while its
 * socket stops is reset by the kernel, which checked the socket listened
 * before it queued the connection (in tcp_check_req, under the softirq; no
 * lock of ours can hold it off): under wrk, about one connection in 100
 * in-place restarts on io_uring. So the program also steers: it picks, by the
 * connection's hash, one of the sockets of the copy that attached it last,
 * the newest, and a copy being replaced gets no new connection to lose;
 * migrated ones go there too. A socket that closes leaves the map, and with
 * none of the newest copy's left, the kernel picks by hash among those that
 * listen, as it does with no program. */

static bool migration_sysctl_on(void) {
    int fd = open("/proc/sys/net/ipv4/tcp_migrate_req", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char c = '0';
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n == 1 && c == '1';
}

/* A map of the n sockets fds, by index; -1 with errno. */
static int steer_map(const int *fds, int n) {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_REUSEPORT_SOCKARRAY;
    attr.key_size = sizeof(uint32_t);
    attr.value_size = sizeof(uint64_t);
    attr.max_entries = (uint32_t)n;
    int map = (int)syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
    for (int i = 0; i < n && map >= 0; i++) {
        uint32_t key = (uint32_t)i;
        uint64_t fd = (uint64_t)fds[i];
        memset(&attr, 0, sizeof attr);
        attr.map_fd = (uint32_t)map;
        attr.key = (uint64_t)(uintptr_t)&key;
        attr.value = (uint64_t)(uintptr_t)&fd;
        attr.flags = BPF_ANY;
        if (syscall(SYS_bpf, BPF_MAP_UPDATE_ELEM, &attr, sizeof attr) != 0) {
            int saved = errno;
            close(map);
            errno = saved;
            map = -1;
        }
    }
    return map;
}

/* select_reuseport(ctx, map, &(hash % n), 0), whatever it returns, then
 * SK_PASS: a socket selected takes the connection, else the kernel picks. */
static int load_steer_program(int map, int n) {
    const struct bpf_insn steer[] = {
        {.code = BPF_LDX | BPF_MEM | BPF_W,
         .dst_reg = BPF_REG_2,
         .src_reg = BPF_REG_1,
         .off = offsetof(struct sk_reuseport_md, hash)},
        {.code = BPF_ALU | BPF_MOD | BPF_K, .dst_reg = BPF_REG_2, .imm = n},
        {.code = BPF_STX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_10, .src_reg = BPF_REG_2, .off = -4},
        {.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_2, .src_reg = BPF_PSEUDO_MAP_FD, .imm = map},
        {.code = 0}, /* the map's second half */
        {.code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_3, .src_reg = BPF_REG_10},
        {.code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_3, .imm = -4},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_4, .imm = 0},
        {.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_sk_select_reuseport},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = SK_PASS},
        {.code = BPF_JMP | BPF_EXIT},
    };
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.prog_type = BPF_PROG_TYPE_SK_REUSEPORT;
    attr.expected_attach_type = BPF_SK_REUSEPORT_SELECT_OR_MIGRATE;
    attr.insns = (uint64_t)(uintptr_t)steer;
    attr.insn_cnt = sizeof steer / sizeof steer[0];
    attr.license = (uint64_t)(uintptr_t) "GPL";
    return (int)syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr);
}

xListenerHandover xListenerHandOverOnClose(const int *fds, int n) {
    int map = n > 0 ? steer_map(fds, n) : -1;
    int program = map >= 0 ? load_steer_program(map, n) : -1;
    int attached = -1;
    if (program >= 0) /* the group holds the program, and it the map, from here on */
        attached = setsockopt(fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &program, sizeof program);
    int saved = errno;
    if (program >= 0) close(program);
    if (map >= 0) close(map);
    if (attached == 0) return XLISTENER_HANDOVER_PROGRAM;
    if (migration_sysctl_on()) return XLISTENER_HANDOVER_SYSCTL;
    errno = saved;
    return XLISTENER_HANDOVER_DROPPED;
}

void xListenerCloseOwn(int fd) {
    /* A listening socket shut down for reading stops at once, as in its
     * last close (the kernel's tcp_disconnect: unhashed, then its queue
     * migrated or reset), whoever else holds it; the close then ends it. */
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

bool xListenerAdopt(int fd, int backlog) {
    int type = 0, listening = 0, family = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return false;
    len = sizeof family;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) != 0) return false;
    if (type != SOCK_STREAM || (family != AF_INET && family != AF_INET6)) {
        errno = EPROTOTYPE;
        return false;
    }
    len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return false;
    if (!listening) {
        if (xListenerPort(fd) == 0) {
            errno = EINVAL; /* not bound: listen(2) would pick a port no one knows */
            return false;
        }
        if (listen(fd, backlog) != 0) return false;
    }
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

/* ---- Sockets passed by systemd ---- */

#define XLISTENER_SYSTEMD_FIRST_FD 3 /* SD_LISTEN_FDS_START */

/* A decimal environment variable's value, or -1 when it is missing or not
 * all digits (or absurd). */
static long env_number(const char *name) {
    const char *text = getenv(name);
    if (!text || !*text || strlen(text) > 10) return -1;
    long value = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        value = value * 10 + (*p - '0');
    }
    return value;
}

int xListenerSystemd(xListenerPassed *passed, int max) {
    long pid = env_number("LISTEN_PID"), count = env_number("LISTEN_FDS");
    if (pid != (long)getpid() || count <= 0) return 0;
    if (count > max) count = max;
    const char *names = getenv("LISTEN_FDNAMES");
    for (int i = 0; i < count; i++) {
        passed[i].fd = XLISTENER_SYSTEMD_FIRST_FD + i;
        fcntl(passed[i].fd, F_SETFD, FD_CLOEXEC);
        size_t len = 0;
        if (names) {
            len = strcspn(names, ":");
            if (len >= sizeof passed[i].name) len = sizeof passed[i].name - 1;
            memcpy(passed[i].name, names, len);
            names += strcspn(names, ":");
            names = *names ? names + 1 : NULL;
        }
        if (len == 0)
            snprintf(passed[i].name, sizeof passed[i].name, "unknown");
        else
            passed[i].name[len] = '\0';
    }
    return (int)count;
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
