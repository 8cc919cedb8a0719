"""The reverse proxy against others' rules and peers: h2spec against its
HTTP/2 front, a battery of request-smuggling shapes that the front must
refuse before any upstream sees a byte (HTTP/1.1 and h2), Go's net/http
server as the upstream, and 10,000 client connections held at once over a
pool of 64 upstream connections."""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import h2.config
import h2.connection
import h2.events

from support.harness import Conn, ServerProcess, raw_exchange, start_owned
from test_h2spec import CASE_TIMEOUT, MIN_CASES, RUN_TIMEOUT, find_h2spec, junit_cases
from test_proxy_depth import Upstream

GO_UPSTREAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "goupstream")

# Each refused with 4xx/5xx by the front; the name says the shape.
SMUGGLING_SHAPES = {
    "cl-and-te": b"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    "te-and-cl": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n"
    b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    "two-lengths": b"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
    "two-equal-lengths": b"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde",
    "length-list": b"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nabcdef",
    "length-with-sign": b"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nabcde",
    "obs-fold": b"GET {p} HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "obs-fold-te": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n chunked\r\n\r\n0\r\n\r\n",
    "te-chunked-not-last": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    "te-unknown": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "te-space-before-colon": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "te-two-fields": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n",
    "te-vertical-tab": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n",
    "te-on-http10": b"POST {p} HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "bare-lf-head": b"GET {p} HTTP/1.1\nHost: x\n\n",
    "bare-lf-field": b"GET {p} HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
    "chunk-size-overflow": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"fffffffffffffffff1\r\nx\r\n0\r\n\r\n",
    "chunk-bare-lf": b"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n",
    "space-in-name": b"GET {p} HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n",
    "no-host": b"GET {p} HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET {p} HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    "nul-in-value": b"GET {p} HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "cr-in-value": b"GET {p} HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
}

# HTTP/2 requests malformed by RFC 9113 §8.1.1/§8.2: (fields beyond the
# pseudo-fields, DATA sent). The body goes to a route that reads it whole.
H2_SHAPES = {
    "h2-transfer-encoding": ([("transfer-encoding", "chunked")], b"0\r\n\r\n"),
    "h2-connection": ([("connection", "keep-alive")], b""),
    "h2-length-too-long": ([("content-length", "10")], b"abcde"),
    "h2-length-too-short": ([("content-length", "2")], b"abcde"),
    "h2-uppercase-name": ([("X-Upper", "1")], b""),
    "h2-crlf-in-value": ([("x-a", "a\r\nx-b: b")], b""),
    "h2-te-not-trailers": ([("te", "gzip")], b""),
    # Legal on HTTP/2 (§8.2.1 bars only NUL, CR and LF), not in an HTTP/1.1
    # field-value: the front may take them, the upstream must not see them.
    "h2-control-byte-in-value": ([("x-a", "a\x01b")], b""),
    "h2-del-in-value": ([("x-a", "a\x7fb")], b""),
}


def h2_refused(port, fields, body):
    """Sends one request with fields and body as given (no validation); what
    came back: ("reset", code), ("status", n) or ("goaway", code)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    config = h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    conn = h2.connection.H2Connection(config)
    conn.initiate_connection()
    head = [(":method", "POST"), (":path", "/smug/h2"), (":scheme", "http"), (":authority", "x")]
    conn.send_headers(1, head + fields, end_stream=not body)
    if body:
        conn.send_data(1, body, end_stream=True)
    s.sendall(conn.data_to_send())
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return ("closed", 0)
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.StreamReset):
                    return ("reset", event.error_code)
                if isinstance(event, h2.events.ResponseReceived):
                    return ("status", int(dict(event.headers)[b":status"]))
                if isinstance(event, h2.events.ConnectionTerminated):
                    return ("goaway", event.error_code)
    finally:
        s.close()


class ProxyConformanceTest(unittest.TestCase):
    def proxy(self, url, *extra, timeout=5000):
        args = ["--workers", "1", "--upstream", url, "--upstream-timeout", str(timeout), *extra]
        return start_owned(self, ServerProcess(args))

    def test_h2spec_passes_strictly_against_the_proxy_front(self):
        h2spec = find_h2spec()
        self.assertIsNotNone(h2spec, "h2spec is installed by scripts/install-deps.sh")
        up = Upstream()
        self.addCleanup(up.stop)
        server = self.proxy(f"http://127.0.0.1:{up.port}", "--http2-only")
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "h2spec.xml")
            argv = [h2spec, "-h", "127.0.0.1", "-p", str(server.port), "--timeout", str(CASE_TIMEOUT)]
            argv += ["-P", "/upstream/h2spec", "--strict", "-j", report]
            result = subprocess.run(argv, capture_output=True, timeout=RUN_TIMEOUT)
            output = result.stdout.decode("utf-8", "replace")
            self.assertTrue(os.path.exists(report), f"h2spec wrote no report:\n{output[-4000:]}{result.stderr[-2000:]}")
            cases = junit_cases(report)
        self.assertGreaterEqual(len(cases), MIN_CASES, output[-4000:])
        failing = [f"{p} / {t}: {problem}" for (p, t), problem in sorted(cases.items()) if problem]
        self.assertEqual(failing, [], "h2spec cases that did not pass through the proxy:\n" + "\n".join(failing))
        self.assertTrue(
            any(t.startswith("/upstream/h2spec") for t in up.seen), "h2spec's requests reached the upstream"
        )
        server.stop_and_check()

    def assert_refused(self, server, raw, name):
        out = raw_exchange(server.port, raw, timeout=5)
        status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else 0
        self.assertIn(status, (400, 501), f"{name}: {out[:200]!r}")
        self.assertEqual(out.count(b"HTTP/1.1 "), 1, f"{name}: one answer, then the connection closed")

    def test_smuggling_shapes_are_refused_before_an_upstream_sees_them(self):
        up = Upstream()
        self.addCleanup(up.stop)
        server = self.proxy(f"http://127.0.0.1:{up.port}")
        # A body read whole: every shape is refused before the upstream is even connected to.
        for name, raw in SMUGGLING_SHAPES.items():
            self.assert_refused(server, raw.replace(b"{p}", f"/smug/{name}".encode()), name)
        for name, (fields, body) in H2_SHAPES.items():
            kind, code = h2_refused(server.port, fields, body)
            self.assertTrue(kind in ("reset", "goaway") or (kind == "status" and code >= 400), f"{name}: {kind} {code}")
        time.sleep(0.3)
        self.assertEqual((up.seen, up.connections), ([], 0), "the upstream was reached")
        # A streamed body: the head is refused the same way; a body found bad
        # after the head (a chunk-size overflow, a bare LF in the chunks) may
        # have had a connection opened for it, but no request reaches the upstream whole.
        for name, raw in SMUGGLING_SHAPES.items():
            self.assert_refused(server, raw.replace(b"{p}", f"/upstream/smug/{name}".encode()), name)
        time.sleep(0.3)
        self.assertEqual(up.seen, [], "the upstream saw a request the front had to refuse")
        # The front still proxies a plain request.
        with Conn(server.port) as conn:
            conn.request("GET", "/after")
            self.assertEqual(conn.read_response().status, 200)
        self.assertEqual(up.seen, ["/after"])
        server.stop_and_check()

    def test_go_net_http_as_the_upstream(self):
        go = shutil.which("go") or "/usr/local/go/bin/go"
        self.assertTrue(os.path.exists(go), "Go is installed by scripts/install-deps.sh")
        out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, out, True)
        binary = os.path.join(out, "goupstream")
        done = subprocess.run([go, "build", "-o", binary, "."], cwd=GO_UPSTREAM_DIR, capture_output=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        upstream = subprocess.Popen([binary], stdout=subprocess.PIPE)
        self.addCleanup(upstream.wait)
        self.addCleanup(upstream.kill)
        port = int(upstream.stdout.readline())
        server = self.proxy(f"http://127.0.0.1:{port}")
        body = os.urandom(3 << 20)
        with Conn(server.port) as conn:
            conn.request("GET", "/info?a=1", headers={"X-Kept": "go"})
            info = json.loads(conn.read_response().body)
            self.assertEqual((info["method"], info["path"], info["proto"]), ("GET", "/info?a=1", "HTTP/1.1"))
            self.assertEqual(info["fields"]["X-Kept"], ["go"])
            self.assertEqual(info["fields"]["X-Forwarded-For"], ["127.0.0.1"])
            for target in ("/go/echo", "/upstream/go/echo"):
                conn.request("PUT", target, body=body)
                resp = conn.read_response()
                self.assertEqual((resp.status, resp.header("X-Method"), resp.body), (200, "PUT", body))
                self.assertEqual(resp.header("Content-Length"), str(len(body)))
            conn.request("GET", "/chunked/1000000")
            resp = conn.read_response()
            self.assertEqual((resp.status, len(resp.body)), (200, 1000000))
            self.assertEqual(resp.header("Transfer-Encoding"), "chunked")
            conn.request("HEAD", "/go/echo")
            resp = conn.read_response(head_only=True)
            self.assertEqual((resp.status, resp.header("Content-Length")), (200, "0"))
            conn.request("GET", "/none")
            resp = conn.read_response(head_only=True)
            self.assertEqual((resp.status, resp.header("Content-Length")), (204, None))
            conn.request("GET", "/info")
            self.assertEqual(conn.read_response().status, 200)
        server.stop_and_check()

    def test_10000_client_connections_over_a_pool_of_64(self):
        # The fd limit here is 20,000 for each process: 10,000 client sockets in
        # this one, as many plus 64 upstream ones in the server.
        clients = 10000
        up = Upstream()
        self.addCleanup(up.stop)
        server = self.proxy(
            f"http://127.0.0.1:{up.port}", "--upstream-pool", "64", "--max-connections", "20000", timeout=30000
        )

        async def run():
            conns = []
            for _ in range(clients):
                conns.append(await asyncio.open_connection("127.0.0.1", server.port))
            statuses = []
            # Every connection stays open; requests go in waves the upstream queue takes.
            for start in range(0, clients, 2000):
                wave = conns[start : start + 2000]
                for i, (_, writer) in enumerate(wave):
                    writer.write(f"GET /c/{start + i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

                async def answer(reader):
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    await reader.readexactly(length)
                    return int(head.split(b" ", 2)[1])

                statuses += await asyncio.gather(*(answer(r) for r, _ in wave))
            for _, writer in conns:
                writer.close()
            return statuses

        statuses = asyncio.run(asyncio.wait_for(run(), 240))
        self.assertEqual(statuses, [200] * clients)
        self.assertEqual(len(up.seen), clients)
        self.assertLessEqual(up.connections, 64)
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
