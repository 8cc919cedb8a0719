"""The I/O backend picked at start: io_uring by default, epoll when XK_IO=epoll
asks for it or when the kernel refuses io_uring (here: a seccomp filter, as
Docker's default profile sets, through support/without_io_uring.c), one log
line naming it and, for epoll, why; and a server on either backend serving
requests and stopping cleanly.

io_uring is not skipped where it is missing: this project's machines run it,
so a refusal fails the default test with the reason the server logged."""

import os
import re
import socket
import time
import unittest

from support.harness import Conn, ServerProcess, http_request, raise_fd_limit
from support.tls_fixtures import HttpsServer, TlsConn, client_context, make_certs, use_certs

PING = http_request("GET", "/ping")
IO_LINE = re.compile(r"\bio: (.*)$", re.M)


def without_io_uring_path():
    path = os.environ.get("XK_WITHOUT_URING")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError(
            "XK_WITHOUT_URING is not set to tests/integration/support/without_io_uring "
            "(built with the tests); run this test through ctest"
        )
    return path


class IoBackendTest(unittest.TestCase):
    def start(self, xk_io="", refused=False):
        # XK_IO empty is the default: this file also runs in the suite's epoll pass.
        server = ServerProcess(["--workers", "2"], env={"XK_IO": xk_io})
        if refused:
            server.argv = [without_io_uring_path(), *server.argv]
        self.addCleanup(server.close)
        return server.start()

    def assert_says(self, server, line):
        """Serves, then finds the one line: the first worker whose loop runs logs it, maybe
        a moment after another worker served."""
        self.serve(server)
        deadline = time.monotonic() + 5
        while not IO_LINE.search(server.stderr_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(IO_LINE.findall(server.stderr_text()), [line], server.stderr_tail())
        server.stop_and_check()

    def serve(self, server):
        with Conn(server.port, server.connect_host) as conn:
            for _ in range(3):
                conn.send(PING * 4)
                for _ in range(4):
                    self.assertEqual(conn.read_response().status, 200)

    def test_the_default_is_io_uring_said_once_for_all_workers(self):
        server = self.start()
        self.assert_says(server, "io_uring")

    def test_xk_io_epoll_forces_epoll_and_says_so(self):
        server = self.start("epoll")
        self.assert_says(server, "epoll (XK_IO=epoll)")

    def test_xk_io_io_uring_forces_io_uring(self):
        server = self.start("io_uring")
        self.assert_says(server, "io_uring")

    def test_an_unknown_xk_io_value_is_named_and_the_default_runs(self):
        server = self.start("kqueue")
        self.assert_says(server, "io_uring (XK_IO=kqueue is neither io_uring nor epoll; ignored)")

    def test_io_uring_refused_by_seccomp_falls_back_to_epoll_with_the_reason(self):
        server = self.start(refused=True)
        self.assert_says(server, "epoll (io_uring_setup: Operation not permitted)")

    def test_io_uring_asked_for_but_refused_still_serves_on_epoll(self):
        server = self.start("io_uring", refused=True)
        self.assert_says(server, "epoll (io_uring_setup: Operation not permitted)")


class IoUnderPressureTest(unittest.TestCase):
    """Run in both passes: io_uring's provided buffers running out, and sockets closed while
    their output waits, on whichever backend the pass runs."""

    def setUp(self):
        self.server = ServerProcess(["--workers", "2"]).start()
        self.addCleanup(self.server.close)

    def test_thousands_of_connections_sending_at_once_are_all_answered(self):
        # More connections with bytes waiting at once than the workers can have receive buffers
        # (512 each at most, put in use as needed): the sockets the buffers run out on are read
        # with recv(2) until drained.
        count = 10000
        raise_fd_limit(count + 256)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(count):
            sock = socket.create_connection((self.server.connect_host, self.server.port))
            socks.append(sock)
        for sock in socks:
            sock.sendall(PING * 8)
        for i, sock in enumerate(socks):
            sock.settimeout(30)
            data = b""
            while data.count(b"HTTP/1.1 200") < 8 or not data.endswith(b"pong"):
                piece = sock.recv(65536)
                self.assertTrue(piece, f"connection {i} closed after {data.count(b'HTTP/1.1 200')} responses")
                data += piece
            self.assertEqual(data.count(b"HTTP/1.1 200"), 8)
        self.server.assert_running()
        self.server.stop_and_check()

    def test_tls_connections_sending_at_once_past_the_receive_buffers_are_all_answered(self):
        # After the handshake (OpenSSL's, on the socket) xKit's record layer reads through the
        # loop, so on io_uring TLS connections are received ahead too: more of them with records
        # waiting than one worker has buffers, each answered whole and in order.
        certs = make_certs()
        self.addCleanup(certs.cleanup)
        use_certs(certs)
        server = HttpsServer(certs.rsa, ["--workers", "1"]).start()
        self.addCleanup(server.close)
        count = 700  # one worker's buffers: 512 at most
        raise_fd_limit(count + 256)
        context = client_context()
        conns = []
        self.addCleanup(lambda: [conn.close() for conn in conns])
        for _ in range(count):
            conns.append(TlsConn(server.port, context))
        for conn in conns:
            conn.send(PING * 8)
        for i, conn in enumerate(conns):
            for n in range(8):
                resp = conn.read_response()
                self.assertEqual((resp.status, resp.body), (200, b"pong"), f"connection {i}, response {n}")
        server.assert_running()
        server.stop_and_check()

    def test_connections_closed_while_their_output_waits_leave_the_server_serving(self):
        # Each asks for more than the socket buffers hold, reads a little, then resets: the
        # server is mid-send (or blocked on a full socket) when the connection goes.
        big = http_request("GET", "/echo?size=4000000")
        for _ in range(3):
            socks = []
            for _ in range(50):
                sock = socket.create_connection((self.server.connect_host, self.server.port))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(big * 2)
                socks.append(sock)
            for sock in socks:
                sock.settimeout(10)
                sock.recv(1000)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                sock.close()
        with Conn(self.server.port, self.server.connect_host) as conn:
            conn.send(PING)
            self.assertEqual(conn.read_response().status, 200)
        self.server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
