/* without_io_uring.c — runs a command with io_uring refused, as Docker's
 * default seccomp profile refuses it: io_uring_setup, io_uring_enter and
 * io_uring_register fail with EPERM. The fall-back tests start servers
 * through it. Usage: without_io_uring PROGRAM [ARG...] */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define XK_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define XK_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "without_io_uring: name this architecture's AUDIT_ARCH_* here"
#endif

#define REFUSE(nr)                                                                                           \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROGRAM [ARG...]\n", argv[0]);
        return 2;
    }
    struct sock_filter filter[] = {
        /* Another architecture's numbers mean other calls: refuse nothing there. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, XK_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        REFUSE(__NR_io_uring_setup),
        REFUSE(__NR_io_uring_enter),
        REFUSE(__NR_io_uring_register),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof *filter, .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "without_io_uring: seccomp: %s\n", strerror(errno));
        return 1;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "without_io_uring: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
