"""The I/O backend picked at start: io_uring by default, epoll when XK_IO=epoll
asks for it or when the kernel refuses io_uring (here: a seccomp filter, as
Docker's default profile sets, through support/without_io_uring.c), one log
line naming it and, for epoll, why; and a server on either backend serving
requests and stopping cleanly.

io_uring is not skipped where it is missing: this project's machines run it,
so a refusal fails the default test with the reason the server logged."""

import os
import re
import shutil
import signal
import socket
import tempfile
import time
import unittest

from support.harness import Conn, ServerProcess, http_request, raise_fd_limit
from support.tls_fixtures import HttpsServer, TlsConn, client_context, make_certs, use_certs
from support.wsclient import OP_BINARY, OP_TEXT, WsConn, frame

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


class OutputTest(unittest.TestCase):
    """Run in both passes. On io_uring a turn's output goes as a send through the ring, handed
    in with the wait that ends the turn, its bytes kept until the completion says how many went;
    on epoll as send(2). What a client sees must be the same: responses whole and in order however
    large, a peer that stops reading let go once it closes, and a graceful stop finishing what
    was being sent."""

    def start(self, *args):
        server = ServerProcess(["--workers", "2", *args]).start()
        self.addCleanup(server.close)
        return server

    def test_large_and_small_responses_pipelined_arrive_whole_and_in_order(self):
        # Under 2 KiB a body is copied beside its head (one segment); from 2 KiB on it is sent by
        # reference (a gathered send); megabytes take many sends, the socket filling in between.
        server = self.start()
        sizes = [5_000_000, 10, 3000, 100_000, 1_000_000, 2047, 2048, 65536, 0, 7_000_000]
        pipeline = b"".join(http_request("GET", f"/echo?size={n}") for n in sizes)
        conns = [Conn(server.port, server.connect_host, rcvbuf=(32768 if i % 2 else None)) for i in range(8)]
        for conn in conns:
            self.addCleanup(conn.close)
            conn.send(pipeline)
        for i, conn in enumerate(conns):
            for n in sizes:
                resp = conn.read_response()
                self.assertEqual(resp.status, 200, f"connection {i}, {n} bytes")
                self.assertEqual(len(resp.body), n, f"connection {i}")
                self.assertEqual(resp.body.count(b"x"), n, f"connection {i}: bytes that are not the body's")
        server.stop_and_check()

    def test_files_larger_than_are_copied_arrive_without_a_stall(self):
        # Past 16 KiB a file's range leaves by sendfile(2) after its head: the head must not sit
        # in a send whose completion the loop would only hear at its next wake (200 ms when
        # quiet), ten times over.
        root = tempfile.mkdtemp(prefix="xk-out-")
        self.addCleanup(shutil.rmtree, root)
        body = bytes(range(256)) * 400
        with open(os.path.join(root, "big.bin"), "wb") as f:
            f.write(body)
        server = self.start("--static", root)
        with Conn(server.port, server.connect_host) as conn:
            started = time.monotonic()
            for _ in range(10):
                conn.request("GET", "/static/big.bin")
                resp = conn.read_response()
                self.assertEqual((resp.status, resp.body), (200, body))
            self.assertLess(time.monotonic() - started, 1.0, "responses waited for the loop to wake")
        server.stop_and_check()

    def test_a_websocket_peer_that_stops_reading_then_goes_is_let_go(self):
        # Echoes the client never reads fill its socket and then the server's, so the server's
        # sends meet a full socket while more are due; then the client goes, with a reset or a
        # FIN. Its socket closes (the fd count comes back: nothing is left holding the
        # connection's output) and echoes go on for others.
        server = self.start("--send-timeout", "1500")
        baseline = server.settle_fd_baseline()
        message = frame(OP_BINARY, b"y" * 65536)
        for how in ("reset", "fin"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((server.connect_host, server.port))
            ws = WsConn(server.port, sock=sock)
            self.addCleanup(ws.close)
            sock.settimeout(0.5)
            try:
                for _ in range(256):  # 16 MiB at most: far past both sockets' buffers
                    sock.sendall(message)
            except TimeoutError:
                pass  # the server stopped reading: its output waits
            if how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
            self.assertEqual(server.wait_fd_count(baseline, timeout=10), baseline, f"after a {how}")
            other = WsConn(server.port, host=server.connect_host)
            self.addCleanup(other.close)
            other.send_frame(OP_TEXT, b"hello")
            self.assertEqual(other.read_frame()[2:], (OP_TEXT, b"hello"), f"after a {how}")
            other.close()
        server.stop_and_check()

    def test_a_graceful_stop_finishes_the_responses_being_sent(self):
        # Each response is far larger than the client's socket takes at once, so at SIGTERM every
        # connection is part way through its output: sent a piece at a time as its client reads,
        # each arrives whole before the connection closes, and the server exits cleanly.
        server = self.start("--shutdown-timeout", "20000")
        size = 3_000_000
        conns = [Conn(server.port, server.connect_host, rcvbuf=65536) for _ in range(24)]
        for conn in conns:
            self.addCleanup(conn.close)
            conn.request("GET", f"/echo?size={size}")
        for conn in conns:
            conn.sock.recv(1, socket.MSG_PEEK)  # its response has begun
        server.send_signal(signal.SIGTERM)
        for i, conn in enumerate(conns):
            resp = conn.read_response()
            self.assertEqual(resp.status, 200, f"connection {i}")
            self.assertEqual(len(resp.body), size, f"connection {i}")
            self.assertEqual(resp.body.count(b"x"), size, f"connection {i}")
            self.assertEqual(conn.read_until_eof(5), b"", f"connection {i}")
        server.assert_clean_exit(server.wait_exit(10))


if __name__ == "__main__":
    unittest.main()
