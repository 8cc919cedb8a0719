"""Spliced proxy response bodies (<xhttp/proxy.h>, xnet/splice.h) against peers
that misbehave mid-body, on the backend XK_IO picks (ctest runs this file on
both), spliced and not (--upstream-splice-min 0) where the two paths differ:

200 clients that leave mid-download (a reset before the head, after it, mid-body;
a plain close; a half-close first) leave no socket or pipe behind; one that
half-closes after its request still gets the whole body; an upstream that resets,
goes quiet or sends more than its Content-Length mid-body never has a short or
foreign body presented as complete (the client's connection is cut, or it gets
exactly its bytes and the next answer is the next request's); eight slow readers
of 32 MiB bodies at once hold the server's memory and pipes to a bound. After
each: the server answers a normal request, its descriptors are back where they
were, and its stderr has no sanitizer report."""

import hashlib
import os
import socket
import socketserver
import struct
import threading
import time
import unittest

from support.harness import Conn, fds_of, start_server
from support.upstream import LoopbackServer, read_head

MIB = 1 << 20
BLOCK = os.urandom(MIB)  # every body is this block repeated, cut at its length
# What an upstream that says too little sends after its body: a whole response, so a proxy
# that read on from the same connection would hand it to the next request as its answer.
SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled!"


def body_digest(length):
    digest, left = hashlib.sha256(), length
    while left:
        piece = BLOCK[: min(left, len(BLOCK))]
        digest.update(piece)
        left -= len(piece)
    return digest.hexdigest()


class Upstream(LoopbackServer):
    """GET /upstream/MODE/N answers N bytes (BLOCK repeated) with a Content-Length,
    as MODE says: whole; rst: a quarter of them, then a reset; quiet: a quarter,
    then nothing until stop(); extra: all of them and SMUGGLED after, the
    connection kept."""

    def __init__(self):
        self.stopping = threading.Event()
        super().__init__(Handler)

    def stop(self):
        self.stopping.set()
        super().stop()


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            while True:
                method, target, _ = read_head(self.rfile)
                if method is None:
                    return
                _, _, mode, length = target.split("/")
                length = int(length)
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length)
                left = length // 4 if mode in ("rst", "quiet") else length
                view = memoryview(BLOCK)
                while left:
                    n = min(left, len(BLOCK))
                    left -= n
                    if left == 0 and mode == "extra":
                        # In the body's last write, so they arrive with it: a proxy that
                        # read them on after reading the body would pool the connection
                        # and answer its next request with them.
                        self.wfile.write(bytes(view[:n]) + SMUGGLED)
                    else:
                        self.wfile.write(view[:n])
                if mode == "rst":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if mode == "quiet":
                    self.server.stopping.wait(30)
                    return
        except (ConnectionError, OSError, ValueError):
            return


def get(conn, target):
    conn.sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target.encode())


def read_head_of(conn):
    """The status, Content-Length and what came after the head, from conn's socket."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        piece = conn.sock.recv(65536)
        if not piece:
            raise AssertionError(f"closed before a head: {bytes(buf)[:200]}")
        buf += piece
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = {n.strip().lower(): v.strip() for n, _, v in (ln.partition(b":") for ln in lines[1:])}
    return int(lines[0].split()[1]), int(fields[b"content-length"]), rest


def read_answer(conn):
    """Status, Content-Length, the body's bytes as read (up to the length), their
    SHA-256, whether the connection ended before them, and what came after them."""
    status, length, rest = read_head_of(conn)
    digest, got = hashlib.sha256(), min(len(rest), length)
    digest.update(rest[:length])
    after = rest[length:]
    closed = False
    while got < length:
        try:
            piece = conn.sock.recv(min(1 << 16, length - got))
        except ConnectionResetError:
            piece = b""
        if not piece:
            closed = True
            break
        digest.update(piece)
        got += len(piece)
    return status, length, got, digest.hexdigest(), closed, after


class SpliceAbuseTest(unittest.TestCase):
    def setUp(self):
        self.upstream = Upstream()
        self.addCleanup(self.upstream.stop)

    def proxy(self, *extra, timeout_ms=20000):
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        return start_server(self, [*args, "--upstream-timeout", str(timeout_ms), *extra])

    def assert_whole(self, conn, size):
        get(conn, f"/upstream/whole/{size}")
        status, length, got, digest, closed, after = read_answer(conn)
        self.assertEqual((status, length, got, closed, after), (200, size, size, False, b""))
        self.assertEqual(digest, body_digest(size), size)

    def settle(self, server):
        """The server's socket count once a spliced body went through (the pooled
        upstream connection and a spare pipe made); its pipes before any (its
        stdout); the other descriptors'."""
        pipes = fds_of(server.pid, "pipe:")
        with Conn(server.port, timeout=30) as conn:
            self.assert_whole(conn, MIB)
        total = server.settle_fd_baseline()
        sockets = fds_of(server.pid, "socket:")
        return sockets, pipes, total - sockets - fds_of(server.pid, "pipe:")

    def assert_back(self, server, baseline, what):
        """No client or upstream socket past the baseline, no pipe past the worker's
        spares (8, 2 descriptors each), nothing else new; it serves a normal request
        and a spliced body; no sanitizer report so far."""
        sockets, pipes, others = baseline
        deadline = time.monotonic() + 5
        while fds_of(server.pid, "socket:") > sockets and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(fds_of(server.pid, "socket:"), sockets, what)
        self.assertLessEqual(fds_of(server.pid, "pipe:"), pipes + 16, what)
        rest = server.fd_count() - fds_of(server.pid, "socket:") - fds_of(server.pid, "pipe:")
        self.assertEqual(rest, others, what)
        with Conn(server.port, timeout=30) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().status, 200)
            self.assert_whole(conn, 3 * MIB + 1)
        server.assert_running()
        self.assertEqual(server.sanitizer_reports(), [], server.stderr_tail())

    def test_two_hundred_clients_leaving_mid_download_leave_nothing_behind(self):
        server = self.proxy()
        baseline = self.settle(server)
        size = 8 * MIB

        def reset(conn):
            conn.abort()

        def close(conn):
            conn.sock.close()  # a FIN; the body still coming then meets a reset

        def half_close_then_close(conn):
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.recv(1 << 16)
            conn.sock.close()

        shapes = [
            ("reset before the head", None, reset),
            ("reset after the head", 0, reset),
            ("reset mid-body", 256 << 10, reset),
            ("close mid-body", 256 << 10, close),
            ("half-close, then close", 64 << 10, half_close_then_close),
        ]
        for i in range(200):
            what, read, leave = shapes[i % len(shapes)]
            conn = Conn(server.port, timeout=30, rcvbuf=65536)
            get(conn, f"/upstream/whole/{size}")
            if read is not None:
                status, length, rest = read_head_of(conn)
                self.assertEqual((status, length), (200, size), what)
                got = len(rest)
                while got < read:
                    got += len(conn.sock.recv(1 << 16))
            leave(conn)
        self.assert_back(server, baseline, "200 clients gone mid-download")
        server.stop_and_check()

    def test_a_client_that_half_closes_after_its_request_gets_the_whole_body(self):
        # A FIN after the request says the client sends no more, not that it stopped reading.
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            baseline = self.settle(server)
            size = 16 * MIB + 3
            with Conn(server.port, timeout=30) as conn:
                get(conn, f"/upstream/whole/{size}")
                conn.sock.shutdown(socket.SHUT_WR)
                status, length, got, digest, closed, after = read_answer(conn)
                self.assertEqual((status, length, got, closed, after), (200, size, size, False, b""), extra)
                self.assertEqual(digest, body_digest(size), extra)
                self.assertEqual(conn.sock.recv(1), b"", "the connection ends after the answer")
            self.assert_back(server, baseline, extra)
            server.stop_and_check()

    def test_an_upstream_that_resets_mid_body_cuts_the_client_off(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            baseline = self.settle(server)
            for size in (512 << 10, 8 * MIB):
                # Another client's spliced body goes on meanwhile, whole.
                other = Conn(server.port, timeout=30)
                get(other, f"/upstream/whole/{4 * MIB}")
                other_status, _, other_rest = read_head_of(other)
                with Conn(server.port, timeout=30) as conn:
                    get(conn, f"/upstream/rst/{size}")
                    started = time.monotonic()
                    status, length, got, _, closed, _ = read_answer(conn)
                    self.assertEqual((status, length), (200, size))
                    self.assertTrue(closed, (extra, size, got))
                    self.assertLess(got, size)
                    self.assertLess(time.monotonic() - started, 10, "the client was left waiting")
                self.assertEqual(other_status, 200)
                left = 4 * MIB - len(other_rest)
                while left:
                    piece = other.sock.recv(min(left, 1 << 16))
                    self.assertTrue(piece, "the other client's body was cut")
                    left -= len(piece)
                other.close()
            self.assert_back(server, baseline, extra)
            server.stop_and_check()

    def test_an_upstream_that_goes_quiet_mid_body_cuts_the_client_off_at_the_timeout(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra, timeout_ms=1000)
            baseline = self.settle(server)
            with Conn(server.port, timeout=30) as conn:
                get(conn, f"/upstream/quiet/{8 * MIB}")
                started = time.monotonic()
                status, length, got, _, closed, _ = read_answer(conn)
                took = time.monotonic() - started
            self.assertEqual((status, length, got, closed), (200, 8 * MIB, 2 * MIB, True), extra)
            self.assertGreater(took, 0.8, extra)
            self.assertLess(took, 8, extra)
            self.assert_back(server, baseline, extra)
            server.stop_and_check()

    def test_an_upstream_sending_more_than_its_length_never_answers_the_next_request(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            baseline = self.settle(server)
            for size in (100, 64 << 10, 4 * MIB):
                with Conn(server.port, timeout=30) as conn:
                    get(conn, f"/upstream/extra/{size}")
                    status, length, got, digest, closed, after = read_answer(conn)
                    self.assertEqual((status, length, got, closed), (200, size, size, False), (extra, size))
                    self.assertEqual(digest, body_digest(size))
                    self.assertNotIn(b"smuggled", after)
                    # The next answers, on this connection and a new one, are their requests'.
                    for target_size in (7, 40000):
                        get(conn, f"/upstream/whole/{target_size}")
                        status, length, got, digest, closed, after = read_answer(conn)
                        self.assertEqual((status, length, got), (200, target_size, target_size), (extra, size))
                        self.assertEqual(digest, body_digest(target_size), (extra, size))
                with Conn(server.port, timeout=30) as conn:
                    self.assert_whole(conn, 70000)
            self.assert_back(server, baseline, extra)
            server.stop_and_check()

    def test_slow_readers_of_large_bodies_hold_memory_and_pipes_to_a_bound(self):
        server = self.proxy()
        baseline = self.settle(server)
        before = server.rss_kib()
        readers = [Conn(server.port, timeout=30, rcvbuf=16384) for _ in range(8)]
        for conn in readers:
            get(conn, f"/upstream/whole/{32 * MIB}")
        for conn in readers:
            self.assertEqual(read_head_of(conn)[:2], (200, 32 * MIB))
        # The upstream has written all its sockets take by now; the readers take a little.
        for _ in range(10):
            for conn in readers:
                conn.sock.recv(4096)
            time.sleep(0.1)
        during, pipes = server.rss_kib(), fds_of(server.pid, "pipe:")
        print(f"VmRSS {before} -> {during} KiB, {pipes} pipe descriptors")
        # Each body in flight holds one pipe (2 descriptors) besides the spares.
        self.assertLessEqual(pipes, baseline[1] + 16 + 2 * len(readers))
        self.assertLess(during - before, 16 * 1024, (before, during))
        for i, conn in enumerate(readers):
            if i % 2:
                conn.abort()
            else:
                conn.close()
        self.assert_back(server, baseline, "slow readers gone")
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
