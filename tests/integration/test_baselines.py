"""bench/servers/baseline_uring.c, the io_uring least-work responder (XK_BASELINE_URING), and
bench/servers/baseline_responder.c, the epoll one (XK_BASELINE): a pong per "\\r\\n\\r\\n",
however the requests are split or batched, with the bytes of xKit's own /ping answer
(bench/servers/floor_response.h) and a Date of the current second. With --websocket, both are
the WebSocket echo's floor (bench/servers/floor_websocket.h): a 101 with the right
Sec-WebSocket-Accept however the handshake is split, then an echo per whole "hello" frame of
ws_load -raw's, however the frames are split or batched, and ws_load -raw itself served.

It is built only where CMake finds liburing, and io_uring may be refused by the kernel; both
fail these tests with the reason (make test installs liburing-dev, and this project's
machines run io_uring), never skip them."""

import os
import re
import signal
import time
import unittest
from email.utils import parsedate_to_datetime

from support.harness import Conn, ServerProcess, ServerTestCase, http_request, raise_fd_limit, run_client
from support.wsclient import OP_TEXT, accept_for, frame, handshake_request
from test_websocket import build_ws_load

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


def start_server(*args):
    """The io_uring responder on a free port; fails with its stderr (the reason) if io_uring is refused."""
    return ServerProcess(args, binary=responder_path("XK_BASELINE_URING", "baseline_uring"), port=0).start()


def start_epoll_server(*args):
    return ServerProcess(args, binary=responder_path("XK_BASELINE", "baseline_responder"), port=0).start()


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
        return start_epoll_server()


HELLO = frame(OP_TEXT, b"hello", key=b"\x12\x34\x56\x78")  # what ws_load -raw sends, 11 bytes
ECHO = b"\x81\x05hello"  # and expects back, unmasked


class BaselineUringWebSocketTest(ServerTestCase):
    """--websocket: the floor of xKit's WebSocket echo."""

    @classmethod
    def start_shared_server(cls):
        return start_server("--websocket")

    def upgrade(self, conn, pieces=None, then=b""):
        """Sends the handshake (in pieces of that many bytes when asked) followed by then, and
        checks the 101 and its accept key."""
        request, key = handshake_request()
        if pieces:
            conn.send_in_pieces(request + then, pieces, 0.002)
        else:
            conn.send(request + then)
        response = conn.read_response()
        self.assertEqual(response.status, 101, response.raw_head)
        self.assertEqual(response.header("upgrade"), "websocket")
        self.assertEqual(response.header("sec-websocket-accept"), accept_for(key))
        return conn

    def assert_echoes(self, conn, count):
        self.assertEqual(conn.read_exactly(len(ECHO) * count), ECHO * count)

    def test_the_handshake_gets_a_101_and_each_frame_its_echo(self):
        conn = self.upgrade(self.connect())
        for _ in range(3):
            conn.send(HELLO)
            self.assert_echoes(conn, 1)
        self.assertTrue(conn.stays_open_for(0.1), "extra bytes or a close after the echoes")

    def test_sixteen_frames_in_one_write_get_sixteen_echoes(self):
        conn = self.upgrade(self.connect())
        conn.send(HELLO * 16)
        self.assert_echoes(conn, 16)
        self.assertTrue(conn.stays_open_for(0.1), "more than 16 echoes")

    def test_a_frame_is_answered_once_whole_however_it_is_split(self):
        conn = self.upgrade(self.connect())
        conn.send_in_pieces(HELLO * 2, 3, 0.002)
        self.assert_echoes(conn, 2)
        conn.send(HELLO[:10])
        self.assertTrue(conn.stays_open_for(0.1), "answered before the frame was whole")
        conn.send(HELLO[10:] + HELLO[:4])
        self.assert_echoes(conn, 1)
        conn.send(HELLO[4:])
        self.assert_echoes(conn, 1)

    def test_a_handshake_split_across_reads_and_frames_right_after_it(self):
        conn = self.upgrade(self.connect(), pieces=7, then=HELLO * 2)
        self.assert_echoes(conn, 2)
        conn.send(HELLO)
        self.assert_echoes(conn, 1)

    def test_a_handshake_without_a_key_is_hung_up_on(self):
        conn = self.connect()
        conn.send(handshake_request(key="")[0])
        self.assertEqual(conn.read_until_eof(), b"")

    def test_two_hundred_concurrent_connections_are_each_answered(self):
        raise_fd_limit(1024)
        conns = [self.upgrade(self.connect()) for _ in range(200)]
        for conn in conns:
            conn.send(HELLO)
        for conn in conns:
            self.assert_echoes(conn, 1)

    def test_clients_leaving_mid_handshake_or_mid_frame_are_closed(self):
        with self.upgrade(Conn(self.server.port, self.server.connect_host)) as conn:
            conn.send(HELLO)
            self.assert_echoes(conn, 1)
        previous, fds_before = -1, self.server.fd_count()
        while fds_before != previous:  # the one just closed gone
            time.sleep(0.1)
            previous, fds_before = fds_before, self.server.fd_count()
        for _ in range(20):
            half = Conn(self.server.port, self.server.connect_host)
            half.send(handshake_request()[0][:30])
            half.close()
            gone = self.upgrade(Conn(self.server.port, self.server.connect_host))
            gone.send(HELLO * 64 + HELLO[:5])
            gone.abort()
        conn = self.upgrade(self.connect())
        conn.send(HELLO)
        self.assert_echoes(conn, 1)
        self.assertEqual(self.server.wait_fd_count(fds_before + 1), fds_before + 1, "connections left open")

    def test_ws_load_raw_is_served_with_every_echo_checked(self):
        load = build_ws_load(self)
        url = f"ws://127.0.0.1:{self.server.port}/ws"
        for extra in (["-inflight", "1"], ["-inflight", "16"], ["-inflight", "4", "-reupgrade", "10"]):
            with self.subTest(extra=extra):
                argv = [load, "-raw", "-url", url, "-conns", "20", "-duration", "1s", *extra]
                result = run_client(argv, timeout=120)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertRegex(result.stdout.decode(), r"messages=[1-9]\d* seconds=\S+ rate=\d+ errors=0")


class BaselineEpollWebSocketTest(BaselineUringWebSocketTest):
    """The same, on the epoll responder."""

    @classmethod
    def start_shared_server(cls):
        return start_epoll_server("--websocket")


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
