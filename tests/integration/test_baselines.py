"""bench/servers/baseline_uring.c, the io_uring least-work responder (XK_BASELINE_URING), and
bench/servers/baseline_responder.c, the epoll one (XK_BASELINE): a pong per "\\r\\n\\r\\n",
however the requests are split or batched, with the bytes of xKit's own /ping answer
(bench/servers/floor_response.h) and a Date of the current second.

It is built only where CMake finds liburing, and io_uring may be refused by the kernel; both
fail these tests with the reason (make test installs liburing-dev, and this project's
machines run io_uring), never skip them."""

import os
import re
import signal
import time
import unittest
from email.utils import parsedate_to_datetime

from support.harness import Conn, ServerProcess, ServerTestCase, http_request, raise_fd_limit

PONG = re.compile(
    rb"HTTP/1\.1 200 OK\r\nServer: base\r\nDate: ([A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} "
    rb"\d\d:\d\d:\d\d GMT)\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\npong"
)
PONG_LEN = 119  # xKit's answer to GET /ping, byte for byte in length
PING = http_request("GET", "/ping")


def check_pongs(test, data, count):
    """data is count pongs, each dated within two seconds of now."""
    test.assertEqual(len(data), PONG_LEN * count, data[:200])
    for i in range(count):
        match = PONG.fullmatch(data[i * PONG_LEN : (i + 1) * PONG_LEN])
        test.assertIsNotNone(match, data[i * PONG_LEN : (i + 1) * PONG_LEN])
        age = time.time() - parsedate_to_datetime(match.group(1).decode()).timestamp()
        test.assertTrue(-2 < age < 2, f"Date {match.group(1)} is {age:.1f} s off")


def responder_path(variable, what):
    path = os.environ.get(variable)
    if not path:
        raise AssertionError(
            f"{variable} is not set: {what} was not built, which happens when CMake finds "
            "no liburing (apt-get install liburing-dev, or scripts/install-deps.sh), "
            "or this test ran outside ctest"
        )
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{variable}={path} is not an executable file")
    return path


def start_server():
    """The io_uring responder on a free port; fails with its stderr (the reason) if io_uring is refused."""
    return ServerProcess(binary=responder_path("XK_BASELINE_URING", "baseline_uring"), port=0).start()


class BaselineUringTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        return start_server()

    def assert_answers(self, conn, count=1):
        check_pongs(self, conn.read_exactly(PONG_LEN * count), count)

    def test_get_gets_the_pong_and_the_connection_stays_open(self):
        conn = self.connect()
        for _ in range(3):
            conn.send(PING)
            self.assert_answers(conn)
        self.assertTrue(conn.stays_open_for(0.1), "extra bytes or a close after the pongs")

    def test_sixteen_pipelined_requests_in_one_write_get_sixteen_responses(self):
        conn = self.connect()
        conn.send(PING * 16)
        self.assert_answers(conn, 16)
        self.assertTrue(conn.stays_open_for(0.1), "more than 16 responses")

    def test_a_terminator_split_across_reads_counts_once(self):
        conn = self.connect()
        # Each piece is its own segment (TCP_NODELAY) and, after the pause, its own recv.
        conn.send_in_pieces(PING * 2, 1, 0.002)
        self.assert_answers(conn, 2)
        conn.send(b"GET / HTTP/1.1\r\n\r")
        self.assertTrue(conn.stays_open_for(0.1), "answered before the terminator was complete")
        conn.send(b"\n\r\n")
        # "\r\n\r" then "\r\n\r\n": the second '\r' restarts the match.
        conn.send(b"GET / HTTP/1.1\r\n\r\r\n\r\n")
        self.assert_answers(conn, 2)

    def test_two_hundred_concurrent_connections_are_each_answered(self):
        raise_fd_limit(1024)
        conns = [self.connect() for _ in range(200)]
        for conn in conns:
            conn.send(PING)
        for conn in conns:
            self.assert_answers(conn)
        for conn in conns:
            conn.send(PING * 2)
        for conn in conns:
            self.assert_answers(conn, 2)

    def test_clients_leaving_mid_request_do_not_end_it(self):
        fds_before = self.server.settle_fd_baseline()  # earlier tests' connections closed
        for _ in range(20):
            half = Conn(self.server.port, self.server.connect_host)
            half.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
            half.close()
            reset = Conn(self.server.port, self.server.connect_host)
            reset.send(b"GET /ping HTTP/1.1\r\n")
            reset.abort()
            # Requests sent and the connection reset before the answers can be read.
            gone = Conn(self.server.port, self.server.connect_host)
            gone.send(PING * 64)
            gone.abort()
        conn = self.connect()
        conn.send(PING)
        self.assert_answers(conn)
        # Every connection that left was closed: the server holds what it held before, plus ours.
        deadline = time.monotonic() + 5
        while len(os.listdir(f"/proc/{self.server.pid}/fd")) != fds_before + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(
            len(os.listdir(f"/proc/{self.server.pid}/fd")),
            fds_before + 1,
            "connections left open after their clients went",
        )

    def test_the_date_follows_the_clock(self):
        conn = self.connect()
        conn.send(PING)
        first = PONG.fullmatch(conn.read_exactly(PONG_LEN)).group(1)
        time.sleep(1.1)
        conn.send(PING)
        self.assertNotEqual(PONG.fullmatch(conn.read_exactly(PONG_LEN)).group(1), first)

    def test_the_pong_is_as_long_as_xkits_answer_to_get_ping(self):
        xkit = ServerProcess(args=["--workers", "1"]).start()
        try:
            conn = Conn(xkit.port, xkit.connect_host)
            conn.send(PING)
            answer = conn.read_exactly(PONG_LEN)
            self.assertTrue(
                answer.startswith(b"HTTP/1.1 200 OK\r\nServer: xkit\r\nDate: ") and answer.endswith(b"\r\n\r\npong"),
                answer,
            )
            self.assertTrue(conn.stays_open_for(0.1), "xKit's answer is longer than the floor's")
            conn.close()
        finally:
            xkit.close()


class BaselineEpollTest(BaselineUringTest):
    """The same, on the epoll responder."""

    @classmethod
    def start_shared_server(cls):
        return ServerProcess(binary=responder_path("XK_BASELINE", "baseline_responder"), port=0).start()


class BaselineUringStopTest(unittest.TestCase):
    def stop_with(self, sig, busy):
        server, conns = start_server(), []
        try:
            if busy:  # connections open, one of them with a request half sent
                conns = [Conn(server.port, server.connect_host) for _ in range(5)]
                for conn in conns:
                    conn.send(PING)
                    check_pongs(self, conn.read_exactly(PONG_LEN), 1)
                conns[0].send(b"GET / HTTP/1.1\r\n")
            server.stop_and_check(sig)  # exit status 0, checked; its port is free for others again
        finally:
            for conn in conns:
                conn.close()
            server.close()

    def test_sigterm_ends_it_with_exit_0(self):
        self.stop_with(signal.SIGTERM, busy=True)

    def test_sigint_ends_it_with_exit_0(self):
        self.stop_with(signal.SIGINT, busy=False)


if __name__ == "__main__":
    unittest.main()
