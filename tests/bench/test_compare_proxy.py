"""`xkbench compare proxy` and its floor: the least-work proxy (bench/servers/floor_proxy.c) relays
every framing it must find the end of, on one kept-alive upstream connection, against a Python
upstream; its upstream (baseline_responder --bodies) answers an upload after its last byte; and
one tiny run of the comparison (xKit and the floor, GET, the auth-subrequest shape and idle memory,
one 1-s run) writes a report with the figures and the ratio table."""

import contextlib
import http.client
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

import support

XKBENCH = support.REPO_ROOT / "bench" / "xkbench"
BUILD_DIR = os.environ.get("XK_BUILD_DIR")
FLOOR = Path(BUILD_DIR or ".") / "bench" / "floor_proxy"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Upstream(socketserver.ThreadingTCPServer):
    """An HTTP/1.1 upstream that reads whole requests (Content-Length or chunked bodies) and
    answers by path with each framing a proxy must follow; it counts its connections."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), UpstreamHandler)
        self.connections = 0


class UpstreamHandler(socketserver.StreamRequestHandler):
    def handle(self):
        self.server.connections += 1
        while True:
            line = self.rfile.readline()
            if not line:
                return
            method, path, _ = line.decode().split(" ", 2)
            fields = {}
            while (field := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = field.decode().partition(":")
                fields[name.strip().lower()] = value.strip()
            body = self.read_body(fields)
            if not self.answer(method, path, body):
                return

    def read_body(self, fields):
        if "chunked" in fields.get("transfer-encoding", ""):
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            return body
        return self.rfile.read(int(fields.get("content-length", 0)))

    def answer(self, method, path, body):
        """Writes the answer for path; False once the connection is to close."""
        out = self.wfile
        if path == "/length":
            payload = b"a" * 100_000
            out.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload))
            if method != "HEAD":
                out.write(payload)
        elif path == "/chunked":  # an extension, chunks cut mid-way by TCP, and a trailer
            out.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            out.write(b"5;ext=1\r\nhello\r\n")
            out.flush()
            time.sleep(0.05)
            out.write(b"6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n")
        elif path == "/no-content":
            out.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        elif path == "/echo":
            out.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif path == "/until-close":
            out.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end")
            return False
        return True


@unittest.skipUnless(BUILD_DIR, "XK_BUILD_DIR is not set: run this through ctest")
class FloorProxyTest(unittest.TestCase):
    def setUp(self):
        self.upstream = Upstream()
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        self.port = free_port()
        self.proxy = subprocess.Popen(
            [str(FLOOR), str(self.port), f"127.0.0.1:{self.upstream.server_address[1]}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.assertIn("listening on", self.proxy.stdout.readline())
        self.client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def tearDown(self):
        self.client.close()
        self.proxy.terminate()
        self.proxy.wait(timeout=10)
        self.proxy.stdout.close()
        self.upstream.shutdown()
        self.upstream.server_close()

    def ask(self, method, path, body=None, chunked=False):
        self.client.request(method, path, body=body, encode_chunked=chunked)
        response = self.client.getresponse()
        return response.status, response.read(), response

    def test_every_framing_is_relayed_whole_on_one_kept_alive_upstream_connection(self):
        self.assertEqual(self.ask("GET", "/length")[:2], (200, b"a" * 100_000))
        status, body, response = self.ask("GET", "/chunked")
        self.assertEqual((status, body), (200, b"hello world"))
        self.assertEqual(response.getheader("Transfer-Encoding"), "chunked")  # the bytes, untouched
        self.assertEqual(self.ask("HEAD", "/length")[:2], (200, b""))
        self.assertEqual(self.ask("GET", "/no-content")[:2], (204, b""))
        upload = os.urandom(300_000)
        self.assertEqual(self.ask("POST", "/echo", upload)[:2], (200, upload))
        self.assertEqual(
            self.ask("POST", "/echo", iter([b"x" * 70_000, b"y" * 5]), chunked=True)[:2],
            (200, b"x" * 70_000 + b"yyyyy"),
        )
        self.assertEqual(self.upstream.connections, 1)
        self.assertEqual(self.ask("GET", "/until-close")[:2], (200, b"to the end"))

    def test_pipelined_requests_are_answered_in_order(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(
                b"GET /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\none" * 2
                + b"GET /no-content HTTP/1.1\r\n\r\n"
            )
            received = b""
            while not received.endswith(b"204 No Content\r\n\r\n"):
                chunk = sock.recv(65536)
                self.assertTrue(chunk, received)
                received += chunk
        self.assertEqual(received.count(b"Content-Length: 3\r\n\r\none"), 2)


@contextlib.contextmanager
def bodies_responder():
    """compare proxy's upstream, baseline_responder --bodies, on a free port (yielded) while the
    block runs."""
    port = free_port()
    responder = subprocess.Popen(
        [str(Path(BUILD_DIR) / "bench" / "baseline_responder"), str(port), "--bodies"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "listening on" in responder.stdout.readline()
        yield port
    finally:
        responder.terminate()
        responder.wait(timeout=10)
        responder.stdout.close()


@unittest.skipUnless(BUILD_DIR, "XK_BUILD_DIR is not set: run this through ctest")
class UpstreamBodiesTest(unittest.TestCase):
    """compare proxy's upstream, baseline_responder --bodies: a request is answered once its
    Content-Length body has come, however the bytes are cut."""

    def test_an_upload_is_answered_after_its_last_byte(self):
        with bodies_responder() as port:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Len")
                time.sleep(0.05)
                sock.sendall(b"gth: 10\r\n\r\n\r\n\r\n01")  # CRLF CRLF inside the body is body
                sock.settimeout(0.3)
                with self.assertRaises(TimeoutError):
                    sock.recv(4096)
                sock.settimeout(10)
                sock.sendall(b"234567GET /next HTTP/1.1\r\n\r\n")
                received = b""
                while received.count(b"pong") < 2:
                    chunk = sock.recv(4096)
                    self.assertTrue(chunk, received)
                    received += chunk
                self.assertEqual(received.count(b"HTTP/1.1 200 OK"), 2)

    def test_get_big_is_answered_with_256_kib_as_the_socket_takes_it(self):
        with bodies_responder() as port:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answer waits for room
                sock.settimeout(10)
                sock.connect(("127.0.0.1", port))
                for _ in range(2):
                    sock.sendall(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
                    received = b""
                    while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < 256 << 10:
                        time.sleep(0.001)
                        chunk = sock.recv(8192)
                        self.assertTrue(chunk, len(received))
                        received += chunk
                    head, _, body = received.partition(b"\r\n\r\n")
                    self.assertIn(b"Content-Length: 262144", head)
                    self.assertEqual(body, b"x" * (256 << 10))
                sock.sendall(b"GET /ping HTTP/1.1\r\n\r\n")
                self.assertIn(b"pong", sock.recv(4096))


@unittest.skipUnless(BUILD_DIR, "XK_BUILD_DIR is not set: run this through ctest")
@unittest.skipUnless(shutil.which("wrk") and shutil.which("taskset"), "needs wrk and taskset (make deps installs them)")
class CompareProxySmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = Path(tempfile.mkdtemp(prefix="xkbench_compare_proxy-"))
        argv = [sys.executable, str(XKBENCH), "compare", "proxy", "--build-dir", BUILD_DIR, "--out-dir", str(cls.out)]
        argv += ["--servers", "xkit,floor", "--cases", "get,idle,auth", "--runs", "1", "--duration", "1"]
        argv += ["--idle-connections", "50", "--idle-seconds", "0.5", "--first-port", "27000"]
        cls.done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        reports = list((cls.out / "compare" / "proxy").glob("*.json"))
        cls.report = json.loads(reports[0].read_text()) if reports else None
        cls.markdown = reports[0].with_suffix(".md").read_text() if reports else ""

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.done.returncode, 0, self.done.stderr[-3000:])
        self.assertIsNotNone(self.report, "no report written")

    def test_the_floor_is_measured_in_both_cases(self):
        get, idle = self.report["results"]["get"]["floor"][0], self.report["results"]["idle"]["floor"][0]
        self.assertTrue(get["ok"], get)
        self.assertGreater(get["requests"], 100)
        self.assertGreater(get["cpu_us_per_request"], 0)
        self.assertTrue(idle["ok"], idle)
        self.assertEqual(idle["connections"], 50)

    def test_the_auth_shape_is_measured_for_xkit_and_not_for_the_floor(self):
        auth = self.report["results"]["auth"]["xkit"][0]
        self.assertTrue(auth["ok"], auth)
        self.assertGreater(auth["requests"], 100)
        self.assertNotIn("floor", self.report["results"]["auth"])
        self.assertIn("floor (http1auth)", self.report["skipped"])

    def test_xkit_has_its_rows_and_the_ratio_table_names_the_targets(self):
        self.assertEqual(len(self.report["results"]["get"]["xkit"]), 1)
        self.assertIn("| Case | xkit ÷ floor |", self.markdown)
        ratio_row = next(line for line in self.markdown.splitlines() if line.startswith("| get | "))
        if self.report["results"]["get"]["xkit"][0]["ok"]:
            self.assertRegex(ratio_row, r"^\| get \| \d+\.\d\d× \(target ≤ 1\.15×: (met|not met)\) \|")
        else:  # no ratio, and the report says why
            self.assertTrue(ratio_row.startswith("| get | n/a |"), ratio_row)
            self.assertIn("- xkit get run 1: failed — ", self.markdown)


if __name__ == "__main__":
    unittest.main()
