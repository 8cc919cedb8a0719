"""HTTP/2 upstreams (xHttpUpstreamConf.protocol, the bench server's
--upstream-h2): h2c by prior knowledge to an xKit server (--test-routes, a
static folder), through a TCP relay of the test's own that counts the
connections the front opens.

Checked: 100 requests at once from 100 clients share one upstream
connection (the relay saw one) and each gets its own answer; bodies of a
few MiB both ways, held to the flow-control windows (the upstream's 64 KiB
initial stream window, ours of 256 KiB); a chunked answer's trailer crosses
from an HTTP/2 trailer HEADERS frame to the HTTP/1.1 client; an upstream
that goes away is 502 and the next request opens a new connection."""

import hashlib
import json
import os
import socket
import tempfile
import threading
import time
import unittest
import zlib
from concurrent.futures import ThreadPoolExecutor

from support.harness import Conn, ServerProcess, bench_server_path, start_owned, start_server


class Relay:
    """Passes TCP from a loopback port of its own to target_port; .connections counts accepts."""

    def __init__(self, target_port):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def stop(self):
        self.sock.close()

    def serve(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the upstream is gone: so is this connection
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class UpstreamH2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.TemporaryDirectory(prefix="xkit-up-h2-")
        cls.big = os.urandom(3 << 20)
        with open(os.path.join(cls.root.name, "big.bin"), "wb") as out:
            out.write(cls.big)

    @classmethod
    def tearDownClass(cls):
        cls.root.cleanup()

    def setUp(self):
        self.upstream = start_server(self, ["--workers", "1", "--static", self.root.name])
        self.relay = Relay(self.upstream.port)
        self.addCleanup(self.relay.stop)
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.relay.port}", "--upstream-h2"]
        args += ["--upstream-timeout", "5000", "--max-body", "16777216"]
        # Without --test-routes (start_server's), so /whoami, /upload and /stream go upstream.
        self.front = start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args]))

    def request(self, method, target, body=None):
        conn = Conn(self.front.port)
        try:
            conn.request(method, target, body=body)
            return conn.read_response()
        finally:
            conn.close()

    def test_a_hundred_requests_at_once_share_one_connection(self):
        def one(i):
            resp = self.request("GET", f"/whoami?q=r{i}")
            return resp.status, json.loads(resp.body)

        with ThreadPoolExecutor(max_workers=100) as pool:
            results = list(pool.map(one, range(100)))
        for i, (status, info) in enumerate(results):
            self.assertEqual(status, 200)
            self.assertEqual((info["q"], info["protocol"]), (f"r{i}", "HTTP/2"))
        self.assertEqual(self.relay.connections, 1)
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_bodies_both_ways_and_a_trailer(self):
        resp = self.request("GET", "/static/big.bin")
        self.assertEqual(resp.status, 200)
        self.assertEqual(hashlib.sha256(resp.body).digest(), hashlib.sha256(self.big).digest())
        sent = os.urandom(3 << 20)
        resp = self.request("POST", "/upload", body=sent)
        self.assertEqual(resp.status, 200, resp.body)
        got = json.loads(resp.body)
        self.assertEqual((got["bytes"], got["crc32"]), (len(sent), f"{zlib.crc32(sent):08x}"))
        resp = self.request("GET", "/stream?chunks=40&size=100000&trailer=xkit-h2")
        self.assertEqual(resp.status, 200, resp.body)
        self.assertEqual(len(resp.body), 4000000)
        self.assertIn(b"x-stream-trailer: xkit-h2", [t.lower() for t in resp.trailers])
        self.assertEqual(self.relay.connections, 1)
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_a_stream_that_times_out_is_reset_alone(self):
        with ThreadPoolExecutor(max_workers=4) as pool:
            slow = pool.submit(self.request, "GET", "/delay?ms=8000")
            quick = [pool.submit(self.request, "GET", f"/whoami?q={i}") for i in range(3)]
            for f in quick:
                self.assertEqual(f.result().status, 200)
            resp = slow.result()
        self.assertEqual(resp.status, 504, resp.body)
        self.assertIn(b"first byte timeout", resp.body)
        self.assertEqual(self.request("GET", "/whoami").status, 200)
        self.assertEqual(self.relay.connections, 1)
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_requests_queued_behind_a_connection_that_fails_fail_with_it(self):
        # A resolver that never answers: the connection never comes, after a connect timeout.
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        silent.bind(("127.0.0.1", 0))
        self.addCleanup(silent.close)
        args = ["--workers", "1", "--upstream", "http://svc.test:80", "--upstream-h2", "--upstream-timeout", "1000"]
        args += ["--upstream-resolver", f"127.0.0.1:{silent.getsockname()[1]}"]
        front = start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args]))

        def one(i):
            conn = Conn(front.port)
            try:
                conn.request("GET", f"/whoami?q={i}")
                return conn.read_response().status
            finally:
                conn.close()

        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=20) as pool:
            statuses = list(pool.map(one, range(20)))
        self.assertEqual(statuses, [504] * 20)
        self.assertLess(time.monotonic() - start, 5.0)  # one timeout for all, not one each in turn
        front.stop_and_check()

    def test_clients_that_leave_mid_answer(self):
        # Over HTTP/2 and, for comparison, HTTP/1.1 upstreams: a write to a client that is gone
        # aborts its exchange within the proxy's own body callback, which must not free the call
        # under itself (an ASan build's exit checks).
        h1_args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        h1_front = start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *h1_args]))
        for front in (self.front, h1_front):
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", front.port), timeout=10)
                sock.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                sock.recv(65536)
                sock.close()
            conn = Conn(front.port)
            conn.request("GET", "/whoami")
            self.assertEqual(conn.read_response().status, 200)
            conn.close()
            front.stop_and_check()
        self.upstream.stop_and_check()

    def test_an_upstream_gone_is_502_and_the_next_request_reconnects(self):
        self.assertEqual(self.request("GET", "/whoami").status, 200)
        self.upstream.stop_and_check()
        resp = self.request("GET", "/whoami")
        self.assertEqual(resp.status, 502, resp.body)
        self.assertEqual(self.request("GET", "/ping").status, 200)
        self.front.stop_and_check()


if __name__ == "__main__":
    unittest.main()
