"""Response bodies the proxy splices (conf.splice_min, <xhttp/proxy.h>): a large
Content-Length answer from an HTTP/1.1 upstream goes from the upstream's socket
to a cleartext HTTP/1.1 client's through a pipe, never copied into the server.
Checked as a client sees it, on both backends:

bodies around the 32 KiB threshold and up to 100 MiB arrive byte-exact, on one
connection and to 16 clients at once, spliced or not (--upstream-splice-min 0), and splice(2) is what
moved them (strace -c on the server: splice calls with splicing on, none off);
a client that reads slowly holds the upstream back (the server's VmRSS stays
near where it was while 64 MiB wait to be read); an upstream that closes
mid-body leaves the client a short body and a closed connection, never a hang,
and the server serves on; a client that leaves mid-body leaves no descriptor
behind. TLS, h2c and compressing fronts answer as before; a compressing front
splices what its filter leaves alone (no Accept-Encoding) and codes the rest."""

import gzip
import hashlib
import http.client
import os
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import unittest

from support.harness import Conn, fds_of, require_tool, run_client, start_server
from support.tls_fixtures import HttpsServer, shared_certs, start_owned
from support.upstream import LoopbackServer, read_head

setUpModule, tearDownModule = shared_certs(__name__)
CERTS = None

THRESHOLD = 32 << 10
MIB = 1 << 20
BLOCK = os.urandom(MIB)  # every body is this block repeated, cut at its length


def body_digest(length):
    digest, left = hashlib.sha256(), length
    while left:
        piece = BLOCK[: min(left, len(BLOCK))]
        digest.update(piece)
        left -= len(piece)
    return digest.hexdigest()


class Upstream(LoopbackServer):
    """An HTTP/1.1 upstream on a free loopback port: GET /N answers N bytes
    (BLOCK repeated) with a Content-Length; GET /text/N the same as
    text/plain (a type the compression filter codes); GET /cut/N says N and
    closes after a quarter of them."""

    def __init__(self):
        super().__init__(Handler)


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            while True:
                method, target, _ = read_head(self.rfile)
                if method is None:
                    return
                cut = target.startswith("/upstream/cut/")
                typed = b"Content-Type: text/plain\r\n" if target.startswith("/upstream/text/") else b""
                length = int(target.rsplit("/", 1)[1])
                self.wfile.write(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (typed, length))
                left = length // 4 if cut else length
                view = memoryview(BLOCK)
                while left:
                    n = min(left, len(BLOCK))
                    self.wfile.write(view[:n])
                    left -= n
                self.wfile.flush()
                if cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
        except (ConnectionError, OSError, ValueError):
            return


def splice_calls_during(test, server, fetch):
    """How many splice(2) calls the server made while fetch() ran (strace -c)."""
    strace = require_tool(test, "strace")
    fd, out = tempfile.mkstemp(prefix="splice-down-strace-")
    os.close(fd)
    log = out + ".log"
    tracer = subprocess.Popen(
        [strace, "-f", "-c", "-e", "trace=splice", "-o", out, "-p", str(server.pid)],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - the child holds it
    )
    # Attached before the fetch: strace says so ("Process N attached", with its threads).
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(log) as f:
            if "attached" in f.read():
                break
        time.sleep(0.1)
    os.unlink(log)
    try:
        fetch()
    finally:
        tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)
    with open(out) as f:
        report = f.read()
    os.unlink(out)
    for line in report.splitlines():
        fields = line.split()
        if fields and fields[-1] == "splice":
            return int(fields[3]) if len(fields) >= 5 else 0
    return 0


def get(conn, target):
    conn.sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target.encode())


def read_answer(conn, chunk=1 << 16, pause=0.0, after_head=None):
    """Status, Content-Length, the body's length and SHA-256 as read, and
    whether the connection closed: the body is hashed as it comes.
    after_head() is called once the head is in."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        piece = conn.sock.recv(65536)
        if not piece:
            raise AssertionError(f"closed before a head: {bytes(buf)[:200]}")
        buf += piece
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next(
        int(v) for n, _, v in (ln.partition(b":") for ln in lines[1:]) if n.strip().lower() == b"content-length"
    )
    if after_head:
        after_head()
    digest, got, closed = hashlib.sha256(), 0, False
    take = rest[:length]
    digest.update(take)
    got += len(take)
    while got < length:
        piece = conn.sock.recv(min(chunk, length - got))
        if not piece:
            closed = True
            break
        digest.update(piece)
        got += len(piece)
        if pause:
            time.sleep(pause)
    return status, length, got, digest.hexdigest(), closed


class SpliceDownTest(unittest.TestCase):
    def setUp(self):
        self.upstream = Upstream()
        self.addCleanup(self.upstream.stop)

    def proxy(self, *extra, timeout_ms=20000):
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        args += ["--upstream-timeout", str(timeout_ms)]
        return start_server(self, [*args, *extra])

    def assert_whole(self, conn, size):
        get(conn, f"/upstream/{size}")
        status, length, got, digest, _ = read_answer(conn)
        self.assertEqual((status, length, got), (200, size, size))
        self.assertEqual(digest, body_digest(size), size)

    def test_bodies_arrive_byte_exact_spliced_or_not(self):
        sizes = [THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, MIB, 100 * MIB, THRESHOLD, 3 * MIB + 7]
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            with Conn(server.port, timeout=120) as conn:
                for size in sizes:
                    self.assert_whole(conn, size)
                    conn.sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection goes on
                    status, _, _, _, _ = read_answer(conn)
                    self.assertEqual(status, 200)
            server.stop_and_check()

    def test_many_clients_at_once_each_get_their_own_bytes(self):
        server = self.proxy()
        failures = []

        def fetch(n):
            try:
                with Conn(server.port, timeout=120) as conn:
                    for size in (2 * MIB + n, THRESHOLD + n, MIB * 3 - n):
                        self.assert_whole(conn, size)
            except Exception as e:  # noqa: BLE001 - reported below, with the others
                failures.append(f"{n}: {e!r}")

        threads = [threading.Thread(target=fetch, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        server.stop_and_check()

    def splice_calls(self, server, size):
        """How many splice(2) calls the server made while a client fetched size bytes."""

        def fetch():
            with Conn(server.port, timeout=60) as conn:
                self.assert_whole(conn, size)

        return self.splice_calls_during(server, fetch)

    def splice_calls_during(self, server, fetch):
        return splice_calls_during(self, server, fetch)

    def test_splice_moves_the_body(self):
        server = self.proxy()
        spliced = self.splice_calls(server, 8 * MIB)
        # At most a pipe's worth (256 KiB) each way a call: 8 MiB take 64 or more.
        print(f"splice calls: {spliced}")
        self.assertGreaterEqual(spliced, 64)
        server.stop_and_check()
        server = self.proxy("--upstream-splice-min", "0")
        self.assertEqual(self.splice_calls(server, 8 * MIB), 0)
        server.stop_and_check()

    def test_a_compressing_front_splices_what_it_leaves_alone(self):
        """--compress decides per response: a 1 MiB text body to a client
        without Accept-Encoding is spliced, byte-exact; to one that accepts
        gzip it is compressed (chunked), not spliced."""
        server = self.proxy("--compress")
        answers = {}

        def fetch(accept):
            def run():
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                try:
                    conn.putrequest("GET", f"/upstream/text/{MIB}", skip_accept_encoding=True)
                    if accept:
                        conn.putheader("Accept-Encoding", accept)
                    conn.endheaders()
                    res = conn.getresponse()
                    answers[accept] = (
                        res.status,
                        res.getheader("Content-Encoding"),
                        res.getheader("Content-Length"),
                        res.read(),
                    )
                finally:
                    conn.close()

            return run

        spliced = self.splice_calls_during(server, fetch(None))
        status, coding, length, body = answers[None]
        self.assertEqual((status, coding, length, len(body)), (200, None, str(MIB), MIB))
        self.assertEqual(hashlib.sha256(body).hexdigest(), body_digest(MIB))
        self.assertGreater(spliced, 0)
        spliced = self.splice_calls_during(server, fetch("gzip"))
        status, coding, length, body = answers["gzip"]
        self.assertEqual((status, coding, length), (200, "gzip", None))
        plain = gzip.decompress(body)
        self.assertEqual(len(plain), MIB)
        self.assertEqual(hashlib.sha256(plain).hexdigest(), body_digest(MIB))
        self.assertEqual(spliced, 0)
        server.stop_and_check()

    def test_a_slow_reader_holds_the_upstream_back(self):
        server = self.proxy()
        with Conn(server.port, timeout=60) as conn:
            self.assert_whole(conn, MIB)  # pools, buffers, the spare pipe: made
            before = server.rss_kib()
            size = 64 * MIB
            during = []

            def stall():
                time.sleep(2.0)  # the upstream has sent all it could by now
                during.append(server.rss_kib())

            get(conn, f"/upstream/{size}")
            status, length, got, digest, _ = read_answer(conn, chunk=256 << 10, after_head=stall)
        self.assertEqual((status, got, digest), (200, size, body_digest(size)))
        during = during[0]
        print(f"VmRSS {before} -> {during} KiB")
        self.assertLess(during - before, 16 * 1024, (before, during))
        server.stop_and_check()

    def test_a_slow_reader_in_small_pieces_gets_every_byte(self):
        server = self.proxy()
        with Conn(server.port, timeout=60, rcvbuf=16384) as conn:
            get(conn, f"/upstream/{4 * MIB}")
            status, length, got, digest, _ = read_answer(conn, chunk=32 << 10, pause=0.002)
        self.assertEqual((status, got, digest), (200, 4 * MIB, body_digest(4 * MIB)))
        server.stop_and_check()

    def test_a_client_leaving_mid_body_leaves_nothing_behind(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            with Conn(server.port, timeout=60) as conn:
                self.assert_whole(conn, MIB)  # the pooled upstream connection and the spare pipe
            server.settle_fd_baseline()
            sockets = fds_of(server.pid, "socket:")
            for _ in range(10):
                conn = Conn(server.port, rcvbuf=16384)
                get(conn, f"/upstream/{64 * MIB}")
                conn.sock.recv(65536)
                time.sleep(0.2)  # the pipe and both sockets full
                conn.abort()
            with Conn(server.port, timeout=60) as conn:
                self.assert_whole(conn, MIB)
            # No client or upstream connection is left, and no pipe beyond the worker's
            # spares (8 at most, 2 descriptors each): a body cut short closes its pipe.
            deadline = time.monotonic() + 5
            while fds_of(server.pid, "socket:") > sockets and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertLessEqual(fds_of(server.pid, "socket:"), sockets, extra)
            self.assertLessEqual(fds_of(server.pid, "pipe:"), 16, extra)
            server.stop_and_check()

    def test_an_upstream_closing_mid_body_closes_the_client(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            for size in (THRESHOLD * 4, 8 * MIB):
                with Conn(server.port, timeout=30) as conn:
                    get(conn, f"/upstream/cut/{size}")
                    started = time.monotonic()
                    status, length, got, _, closed = read_answer(conn)
                    self.assertEqual((status, length), (200, size))
                    self.assertTrue(closed, (extra, size, got))
                    self.assertLess(got, size)
                    self.assertLess(time.monotonic() - started, 10, "the client was left waiting")
            with Conn(server.port, timeout=60) as conn:
                self.assert_whole(conn, MIB)
            server.stop_and_check()


class FrontsThatKeepTheWrittenPathTest(unittest.TestCase):
    """Fronts whose bytes are not the upstream's as they are (TLS with HTTP/1.1
    and HTTP/2, h2c) keep the written path, and a compressing front answers a
    body it leaves alone (no Content-Type) as before: the body arrives whole
    through each."""

    def setUp(self):
        self.upstream = Upstream()
        self.addCleanup(self.upstream.stop)
        self.options = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        self.options += ["--upstream-timeout", "20000"]

    def fetch(self, url, *flags):
        curl = require_tool(self, "curl")
        fd, out = tempfile.mkstemp(prefix="splice-down-body-")
        os.close(fd)
        self.addCleanup(os.unlink, out)
        done = run_client([curl, "-sS", "--compressed", "-o", out, "-w", "%{http_code} %{http_version}", *flags, url])
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(out, "rb") as f:
            return done.stdout.decode(), hashlib.sha256(f.read()).hexdigest()

    def test_tls_h2c_and_compression(self):
        size = 3 * MIB + 5
        front = start_owned(self, HttpsServer(CERTS.rsa, self.options))
        for version in ("--http1.1", "--http2"):
            got = self.fetch(f"https://127.0.0.1:{front.port}/upstream/{size}", "--cacert", CERTS.ca, version)
            self.assertEqual(got, (f"200 {version[6:]}", body_digest(size)), version)
        front.stop_and_check()
        plain = start_server(self, self.options)
        got = self.fetch(f"http://127.0.0.1:{plain.port}/upstream/{size}", "--http2-prior-knowledge")
        self.assertEqual(got, ("200 2", body_digest(size)))
        plain.stop_and_check()
        compressing = start_server(self, [*self.options, "--compress"])
        got = self.fetch(f"http://127.0.0.1:{compressing.port}/upstream/{size}", "--http1.1")
        self.assertEqual(got, ("200 1.1", body_digest(size)))
        compressing.stop_and_check()


if __name__ == "__main__":
    unittest.main()
