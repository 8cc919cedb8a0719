/* baseline_responder.c on io_uring: one thread that parses nothing. It counts "\r\n\r\n" and answers each
 * with the same pong (floor_response.h), so what xKit costs beyond it is being HTTP, and what the epoll floor
 * costs beyond it is epoll. Multishot accept, multishot recv into a provided buffer ring, and one
 * io_uring_submit_and_wait per turn that sends, per connection, every response the turn owes in one send.
 * With --websocket it is the WebSocket floor (floor_websocket.h): the handshake's 101, then an echo per
 * "hello" frame of ws_load -raw, counted by length. */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor_response.h"
#include "floor_websocket.h"

enum {
    MAX_FDS = 65536,
    READ_SIZE = 16384, /* one provided buffer: what the epoll responder reads at a time */
    BUF_COUNT = 256,   /* provided buffers; a recv that finds none ends with ENOBUFS and is re-armed */
    BUF_GROUP = 1,
    SQ_ENTRIES = 4096,
    CQ_ENTRIES = 16384,
};
enum op { OP_ACCEPT = 1, OP_RECV, OP_SEND, OP_CANCEL, OP_SIGNAL };
#define MAX_BATCH (READ_SIZE / 4) /* responses in one send: a terminator every 4 bytes of a full buffer */
/* MAX_BATCH copies of floor_response, whose Dates are rewritten only while no send is in flight; with
 * --websocket, of floor_ws_echo. */
static char replies[MAX_BATCH * FLOOR_RESPONSE_LEN];
static size_t response_len = FLOOR_RESPONSE_LEN; /* FLOOR_WS_ECHO_LEN with --websocket */
static int websocket;                            /* --websocket: floor_websocket.h's mode */
static unsigned sends_in_flight;
static time_t shown; /* the second the replies' Dates show */

/* Where a connection stands: HTTP requests, or (--websocket) the handshake, its 101, then frames. */
enum phase {
    HTTP_REQUESTS,
    WS_HANDSHAKE,   /* gathering the head */
    WS_ANSWER_OWED, /* its 101 waits for the turn's sends */
    WS_ANSWERING,   /* the 101 is in flight; echoes owed wait for it */
    WS_FRAMES,
};

/* A connection's slot, by fd. Its fd is closed only once no request on it is in flight, so no completion
 * can arrive for a slot whose fd was closed and perhaps reused by a later accept. */
struct conn {
    uint32_t pending;      /* responses owed and not yet handed to a send */
    uint32_t in_send;      /* bytes of the one send in flight, 0 for none */
    unsigned char phase;   /* enum phase */
    unsigned char matched; /* terminator bytes seen at the end of the last recv, or bytes of a frame begun */
    unsigned char receiving; /* the multishot recv is armed */
    unsigned char closing;   /* hanging up: waiting for the recv and the send to end */
    unsigned char queued;    /* in dirty[], to be sent to at the end of this turn */
};
static struct conn conns[MAX_FDS];
static struct floor_ws_head *heads[MAX_FDS]; /* --websocket: the handshake, then its 101 until sent */
static int dirty[MAX_FDS], ndirty;           /* connections owed responses this turn */
static struct io_uring ring;
static struct io_uring_buf_ring *buf_ring;
static char *buffers;
static unsigned returned; /* buffers given back this turn, published before the next submit */

static uint64_t tag(enum op op, int fd) { return (uint64_t)op << 32 | (uint32_t)fd; }

static struct io_uring_sqe *get_sqe(void) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    while (!sqe) { /* the submission queue is full: hand it to the kernel and take a fresh entry */
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

static void arm_accept(int listener) {
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_multishot_accept(sqe, listener, NULL, NULL, 0);
    io_uring_sqe_set_data64(sqe, tag(OP_ACCEPT, listener));
}

static void arm_recv(int fd) {
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BUF_GROUP;
    io_uring_sqe_set_data64(sqe, tag(OP_RECV, fd));
    conns[fd].receiving = 1;
}

static void give_back_buffer(unsigned id) {
    io_uring_buf_ring_add(buf_ring, buffers + (size_t)id * READ_SIZE, READ_SIZE, (unsigned short)id,
                          io_uring_buf_ring_mask(BUF_COUNT), (int)returned++);
}

/* The fd is closed once nothing of ours is in flight on it; until then completions find it closing. */
static void release_if_idle(int fd) {
    struct conn *c = &conns[fd];
    if (c->closing && !c->receiving && !c->in_send) {
        close(fd);
        free(heads[fd]);
        heads[fd] = NULL;
        *c = (struct conn){0};
    }
}

/* A hang-up cancels the armed recv (by its tag, which only this fd's recv carries while the fd is open). */
static void hang_up(int fd) {
    struct conn *c = &conns[fd];
    if (c->closing) return;
    c->closing = 1, c->pending = 0;
    if (c->receiving) {
        struct io_uring_sqe *sqe = get_sqe();
        io_uring_prep_cancel64(sqe, tag(OP_RECV, fd), 0);
        io_uring_sqe_set_data64(sqe, tag(OP_CANCEL, fd));
    }
    release_if_idle(fd);
}

/* On a mismatch the match restarts, except that a '\r' may begin the next terminator. */
static uint32_t count_terminators(struct conn *c, const char *buf, int len) {
    uint32_t count = 0;
    unsigned state = c->matched;
    for (int i = 0; i < len; i++) {
        state = buf[i] == "\r\n\r\n"[state] ? state + 1 : buf[i] == '\r';
        if (state == 4) count++, state = 0;
    }
    c->matched = (unsigned char)state;
    return count;
}

static void owe(int fd, uint32_t count);

/* The handshake, gathered until whole and answered, then the frames: the echoes owed. */
static uint32_t take_websocket(int fd, const char *buf, size_t len) {
    struct conn *c = &conns[fd];
    if (c->phase == WS_HANDSHAKE) {
        int complete;
        long took = floor_ws_gather(heads[fd], buf, len, &complete);
        if (took < 0 || (complete && !floor_ws_answer(heads[fd]))) {
            hang_up(fd);
            return 0;
        }
        if (!complete) return 0;
        c->phase = WS_ANSWER_OWED;
        owe(fd, 0);
        buf += took, len -= (size_t)took;
    }
    return (uint32_t)floor_ws_frames(&c->matched, len);
}

static void owe(int fd, uint32_t count) {
    struct conn *c = &conns[fd];
    c->pending += count;
    if (!c->queued && !c->in_send) c->queued = 1, dirty[ndirty++] = fd;
}

static void on_recv(int fd, const struct io_uring_cqe *cqe) {
    struct conn *c = &conns[fd];
    if (cqe->flags & IORING_CQE_F_BUFFER) {
        unsigned id = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        const char *data = buffers + (size_t)id * READ_SIZE;
        uint32_t count = c->closing || cqe->res <= 0 ? 0
                         : websocket                 ? take_websocket(fd, data, (size_t)cqe->res)
                                                     : count_terminators(c, data, cqe->res);
        give_back_buffer(id);
        if (count) owe(fd, count);
    }
    if (cqe->flags & IORING_CQE_F_MORE) return;
    c->receiving = 0;
    /* The multishot recv ended: at end of stream, on an error, on cancellation, or for want of buffers or
     * of completion-queue room (then it is armed again). */
    if (c->closing)
        release_if_idle(fd);
    else if (cqe->res > 0 || cqe->res == -ENOBUFS)
        arm_recv(fd);
    else
        hang_up(fd);
}

/* Like the epoll responder, a client too slow to take a whole send is hung up on, not queued for:
 * MSG_DONTWAIT makes a full socket buffer fail the send instead of waiting. */
static unsigned send_owed(int fd) {
    struct conn *c = &conns[fd];
    c->queued = 0;
    if (c->closing || c->in_send) return 0;
    const char *bytes = replies;
    if (c->phase == WS_ANSWER_OWED) {
        c->phase = WS_ANSWERING, c->in_send = (uint32_t)heads[fd]->len, bytes = heads[fd]->bytes;
    } else if (c->pending && c->phase != WS_HANDSHAKE && c->phase != WS_ANSWERING) {
        uint32_t count = c->pending < MAX_BATCH ? c->pending : MAX_BATCH;
        c->pending -= count, c->in_send = count * (uint32_t)response_len;
    } else {
        return 0;
    }
    sends_in_flight++;
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_send(sqe, fd, bytes, c->in_send, MSG_DONTWAIT | MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, tag(OP_SEND, fd));
    return 1;
}

static void on_send(int fd, int res) {
    struct conn *c = &conns[fd];
    uint32_t expected = c->in_send;
    c->in_send = 0;
    sends_in_flight--;
    if (c->phase == WS_ANSWERING) { /* the 101 is out */
        c->phase = WS_FRAMES;
        free(heads[fd]);
        heads[fd] = NULL;
    }
    if (res < 0 || (uint32_t)res != expected)
        hang_up(fd);
    else if (c->closing)
        release_if_idle(fd);
    else if (c->pending)
        owe(fd, 0);
}

static void on_accept(int listener, const struct io_uring_cqe *cqe) {
    int one = 1, fd = cqe->res;
    if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept(listener);
    if (fd < 0) return;
    if (fd >= MAX_FDS) {
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns[fd] = (struct conn){.phase = websocket ? WS_HANDSHAKE : HTTP_REQUESTS};
    if (websocket && !(heads[fd] = calloc(1, sizeof *heads[fd]))) {
        close(fd);
        return;
    }
    arm_recv(fd);
}

/* SINGLE_ISSUER | DEFER_TASKRUN (6.1 and later) lets completions be posted only when this thread asks,
 * in one batch per turn; older kernels refuse the flags with EINVAL and get a plain ring. */
static int setup_ring(void) {
    struct io_uring_params params = {.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER |
                                              IORING_SETUP_DEFER_TASKRUN,
                                     .cq_entries = CQ_ENTRIES};
    int err = io_uring_queue_init_params(SQ_ENTRIES, &ring, &params);
    if (err == -EINVAL) {
        params = (struct io_uring_params){.flags = IORING_SETUP_CQSIZE, .cq_entries = CQ_ENTRIES};
        err = io_uring_queue_init_params(SQ_ENTRIES, &ring, &params);
    }
    if (err) {
        fprintf(stderr, "baseline_uring: io_uring_queue_init: %s%s\n", strerror(-err),
                err == -EPERM || err == -ENOSYS ? " (io_uring is disabled here: kernel.io_uring_disabled, "
                                                  "seccomp or a kernel without it)"
                                                : "");
        return err;
    }
    size_t ring_size = BUF_COUNT * sizeof(struct io_uring_buf);
    buf_ring = mmap(NULL, ring_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    buffers = malloc((size_t)BUF_COUNT * READ_SIZE);
    if (buf_ring == MAP_FAILED || !buffers) {
        fprintf(stderr, "baseline_uring: out of memory for the buffer ring\n");
        return -ENOMEM;
    }
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)buf_ring, .ring_entries = BUF_COUNT, .bgid = BUF_GROUP};
    if ((err = io_uring_register_buf_ring(&ring, &reg, 0))) {
        fprintf(stderr,
                "baseline_uring: io_uring_register_buf_ring: %s (provided buffer rings need Linux 5.19)\n",
                strerror(-err));
        return err;
    }
    io_uring_buf_ring_init(buf_ring);
    for (unsigned id = 0; id < BUF_COUNT; id++) give_back_buffer(id);
    io_uring_buf_ring_advance(buf_ring, (int)returned);
    returned = 0;
    return 0;
}

int main(int argc, char **argv) {
    websocket = argc == 3 && strcmp(argv[2], "--websocket") == 0;
    if (argc != 2 && !websocket) {
        fprintf(stderr, "usage: %s PORT [--websocket]\n", argv[0]);
        return 2;
    }
    int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    socklen_t addr_len = sizeof addr;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, SOMAXCONN) ||
        getsockname(listener, (struct sockaddr *)&addr, &addr_len)) {
        perror("listen");
        return 1;
    }
    /* SIGINT and SIGTERM arrive as a completion, so the loop never races a handler. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);
    int sigfd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
    if (sigfd < 0) {
        perror("signalfd");
        return 1;
    }
    if (setup_ring()) return 2;
    const char *response = websocket ? floor_ws_echo : floor_response;
    response_len = websocket ? FLOOR_WS_ECHO_LEN : FLOOR_RESPONSE_LEN;
    for (size_t i = 0; i < MAX_BATCH; i++) memcpy(replies + i * response_len, response, response_len);
    struct signalfd_siginfo siginfo;
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_read(sqe, sigfd, &siginfo, sizeof siginfo, 0);
    io_uring_sqe_set_data64(sqe, tag(OP_SIGNAL, sigfd));
    arm_accept(listener);
    printf("listening on 0.0.0.0:%u (1 worker)\n", ntohs(addr.sin_port)); /* the test harness's format */
    fflush(stdout);

    /* A turn: submit what the last one queued and wait for one more completion than the sends will post
     * (a send with MSG_DONTWAIT completes as it is submitted), then handle every completion, give the
     * turn's buffers back at once, and queue one send per connection owed responses. */
    unsigned sends = 0;
    for (int stop = 0; !stop;) {
        io_uring_buf_ring_advance(buf_ring, (int)returned);
        returned = 0;
        int err = io_uring_submit_and_wait(&ring, sends + 1);
        if (err < 0 && err != -EINTR && err != -ETIME && err != -EBUSY && err != -EAGAIN) {
            fprintf(stderr, "baseline_uring: io_uring_submit_and_wait: %s\n", strerror(-err));
            return 1;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            uint64_t data = io_uring_cqe_get_data64(cqe);
            int fd = (int)(uint32_t)data;
            switch ((enum op)(data >> 32)) {
            case OP_ACCEPT: on_accept(fd, cqe); break;
            case OP_RECV: on_recv(fd, cqe); break;
            case OP_SEND: on_send(fd, cqe->res); break;
            case OP_CANCEL: break;
            case OP_SIGNAL: stop = 1; break;
            }
            seen++;
        }
        io_uring_cq_advance(&ring, seen);
        /* The replies are rewritten only when every send's completion has been reaped (a plain
         * send completes once the kernel has copied its bytes); with one still out, the Date
         * waits a turn. MSG_DONTWAIT sends complete as they are submitted, so that is rare. */
        if (!websocket && !sends_in_flight && floor_date_refresh(floor_response, &shown))
            for (size_t i = 0; i < MAX_BATCH; i++)
                memcpy(replies + i * FLOOR_RESPONSE_LEN + FLOOR_DATE_AT, floor_response + FLOOR_DATE_AT,
                       FLOOR_DATE_LEN);
        sends = 0;
        for (int i = 0; i < ndirty; i++) sends += send_owed(dirty[i]);
        ndirty = 0;
    }
    io_uring_queue_exit(&ring);
    munmap(buf_ring, BUF_COUNT * sizeof(struct io_uring_buf));
    free(buffers);
    close(sigfd);
    close(listener);
    return 0;
}
