/* test_conn_linger.c — a lingering connection (closing, its output out and its
 * write side shut, its peer's last bytes read and dropped) refuses writes:
 * xConnWrite, xConnWriteRef (releasing what it was handed), xConnWriteFile,
 * xConnWriteNow say XERR_CLOSED and xConnReserve gives NULL, nothing is
 * queued, and a flush leaves it lingering (a send into the shut socket would
 * fail and close it, cutting the linger short). The peer reads the FIN and
 * nothing after it. One closing after its output (XCONN_FLUSHING) still takes
 * writes. On epoll and on io_uring. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xbase/event.h>

#include "check.h"
#include "xnet/connection.h"

static void on_readable(xConn *conn) { (void)conn; }
static void on_timeout(xConn *conn) { (void)conn; }

static const xConnProtocol quiet_protocol = {.on_readable = on_readable, .on_timeout = on_timeout};

static int released;
static void release(void *arg) {
    (void)arg;
    released++;
}

static char big[64 << 10];

static void check_refuses_writes(xIoBackend io) {
    xEventLoop *loop = xEventLoopCreateWith(io);
    CHECK(loop != NULL);
    xNetContext net;
    CHECK_EQ_INT(xNetContextInit(&net, loop, 16384, 4, 5000), XOK);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
    xConn *conn = xConnCreate(&net, pair[0], NULL, &quiet_protocol, NULL);
    CHECK(conn != NULL);
    xConnRetain(conn); /* looked at after its close */

    CHECK_EQ_INT(xConnWrite(conn, "answer", 6), XOK);
    xConnCloseAfterFlush(conn);
    /* A socket with room takes the answer at once: the linger begins. */
    CHECK_MSG(xConnLingering(conn), "io %d: not lingering", (int)io);
    CHECK(!xConnTakesOutput(conn));

    released = 0;
    CHECK_EQ_INT(xConnWrite(conn, "late", 4), XERR_CLOSED);
    CHECK(xConnReserve(conn, 16) == NULL);
    CHECK_EQ_INT(xConnWriteRef(conn, big, sizeof big, release, NULL), XERR_CLOSED);
    CHECK_EQ_INT(released, 1);
    CHECK_EQ_INT(xConnWriteFile(conn, pair[1], 0, 1 << 20, release, NULL), XERR_CLOSED);
    CHECK_EQ_INT(released, 2);
    struct iovec piece = {.iov_base = big, .iov_len = sizeof big};
    CHECK_EQ_INT(xConnWriteNow(conn, &piece, 1), XERR_CLOSED);
    CHECK_EQ_INT(xConnPending(conn), 0);
    xConnFlush(conn);
    CHECK_MSG(xConnLingering(conn), "io %d: a flush ended the linger", (int)io);

    char got[64];
    ssize_t n = recv(pair[1], got, sizeof got, 0);
    CHECK_EQ_INT(n, 6);
    CHECK(memcmp(got, "answer", 6) == 0);
    CHECK_EQ_INT(recv(pair[1], got, sizeof got, 0), 0); /* the FIN, nothing after the answer */

    xConnClose(conn);
    xConnRelease(conn);
    close(pair[1]);
    xEventLoopDestroy(loop);
    xNetContextDestroy(&net);
}

static void test_a_lingering_connection_refuses_writes(void) {
    check_refuses_writes(XIO_EPOLL);
    check_refuses_writes(XIO_URING);
}

static void test_a_connection_closing_after_its_output_still_takes_writes(void) {
    xEventLoop *loop = xEventLoopCreateWith(XIO_EPOLL);
    CHECK(loop != NULL);
    xNetContext net;
    CHECK_EQ_INT(xNetContextInit(&net, loop, 16384, 4, 5000), XOK);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
    int small = 4096;
    CHECK(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
    xConn *conn = xConnCreate(&net, pair[0], NULL, &quiet_protocol, NULL);
    CHECK(conn != NULL);
    CHECK_EQ_INT(xConnWrite(conn, big, sizeof big), XOK);
    xConnCloseAfterFlush(conn); /* the socket takes a part: the rest waits */
    CHECK(xConnTakesOutput(conn) && !xConnOpen(conn));
    CHECK_EQ_INT(xConnWrite(conn, "more", 4), XOK);
    xConnClose(conn);
    close(pair[1]);
    xEventLoopDestroy(loop);
    xNetContextDestroy(&net);
}

int main(void) {
    memset(big, 'x', sizeof big);
    RUN(test_a_lingering_connection_refuses_writes);
    RUN(test_a_connection_closing_after_its_output_still_takes_writes);
    return CHECK_SUMMARY();
}
