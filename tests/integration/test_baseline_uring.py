"""bench/servers/baseline_uring.c, the io_uring least-work responder (XK_BASELINE_URING): the
epoll baseline's canned pong per "\\r\\n\\r\\n", however the requests are split or batched.

It is built only where CMake finds liburing, and io_uring may be refused by the kernel; both
fail these tests with the reason (make test installs liburing-dev, and this project's
machines run io_uring), never skip them."""

import os
import signal
import time
import unittest

from support.harness import Conn, ServerProcess, ServerTestCase, http_request, raise_fd_limit

PONG = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Type: text/plain\r\n\r\npong"
PING = http_request("GET", "/ping")


def baseline_uring_path():
    path = os.environ.get("XK_BASELINE_URING")
    if not path:
        raise AssertionError("XK_BASELINE_URING is not set: baseline_uring was not built, which "
                             "happens when CMake finds no liburing (apt-get install liburing-dev, "
                             "or scripts/install-deps.sh), or this test ran outside ctest")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"XK_BASELINE_URING={path} is not an executable file")
    return path


def start_server():
    """The responder on a free port; fails with its stderr (the reason) if io_uring is refused."""
    return ServerProcess(binary=baseline_uring_path(), port=0).start()


class BaselineUringTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        return start_server()

    def assert_answers(self, conn, count=1):
        self.assertEqual(conn.read_exactly(len(PONG) * count), PONG * count)

    def test_get_gets_the_canned_pong_and_the_connection_stays_open(self):
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
        fds_before = len(os.listdir(f"/proc/{self.server.pid}/fd"))
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
        self.assertEqual(len(os.listdir(f"/proc/{self.server.pid}/fd")), fds_before + 1,
                         "connections left open after their clients went")


class BaselineUringStopTest(unittest.TestCase):
    def stop_with(self, sig, busy):
        server, conns = start_server(), []
        try:
            if busy:  # connections open, one of them with a request half sent
                conns = [Conn(server.port, server.connect_host) for _ in range(5)]
                for conn in conns:
                    conn.send(PING)
                    self.assertEqual(conn.read_exactly(len(PONG)), PONG)
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
