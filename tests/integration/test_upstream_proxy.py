"""The upstream client and the reverse proxy (<xhttp/client.h>, <xhttp/proxy.h>)
through the bench server's --upstream: what no route answers goes to the
upstream with its body read whole, /upstream/* with its body streamed.

Upstreams: a small Python HTTP/1.1 server of the test's own, which echoes what
it received (method, target, fields, body) and counts its connections, and
misbehaves on purpose on some paths (refused, reset, closed mid-body, garbage,
a huge head, slow heads and bodies); xKit's own server; nginx serving a file.
Through the proxy: GET and POST with bodies both ways (CL and chunked, a few
MiB), an HTTP/2 front (curl), hop-by-hop fields removed both ways and the
forwarding fields added, 1,000 requests over a pool of 8 upstream
connections, each fault answered 502 or 504 with a body that says why (or,
once the head went out, the client's connection closed), and the server
serving on after all of it with a clean exit (ASan builds)."""

import hashlib
import json
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from support.harness import Conn, request_once, require_tool, start_server
from support.upstream import LoopbackServer, lower_fields, read_body, read_head
from test_h2c_smuggling import free_port, sbin_tool, start_proxy

# The fault cases wait for timeouts; the others get room for a loaded machine under ASan.
SHORT_TIMEOUT = ("--upstream-timeout", "1000")
HOP_FIELDS = ("connection", "keep-alive", "te", "transfer-encoding", "upgrade", "proxy-authorization", "x-secret")


class Upstream(LoopbackServer):
    """An HTTP/1.1 upstream on a free loopback port; .connections counts accepts."""

    def __init__(self):
        self.connections = 0
        super().__init__(UpstreamHandler)


class UpstreamHandler(socketserver.StreamRequestHandler):
    def handle(self):
        with self.server.lock:
            self.server.connections += 1
        while True:
            method, target, fields = read_head(self.rfile)
            if method is None:
                return
            body, framing = read_body(self.rfile, fields)
            if not self.answer(method, target, fields, body, framing):
                return

    def send(self, data):
        self.wfile.write(data)
        self.wfile.flush()

    def answer(self, method, target, fields, body, framing):
        w = self.send
        if target == "/garbage":
            w(b"SPDY/9 banana\r\n\r\n")
            return False
        if target == "/reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return False
        if target == "/close-mid":
            w(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            return False
        if target == "/huge-head":
            w(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100000 + b"\r\nContent-Length: 0\r\n\r\n")
            return False
        if target == "/slow-head":
            time.sleep(3)
            return False
        if target == "/slow-body":
            w(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            time.sleep(3)
            return False
        if "/bytes/" in target:
            n = int(target.rsplit("/", 1)[1])
            data = (b"0123456789abcdef" * (n // 16 + 1))[:n]
            w(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n")
            for i in range(0, n, 65536):
                piece = data[i : i + 65536]
                w(b"%x\r\n%s\r\n" % (len(piece), piece))
            w(b"0\r\nX-Sum: " + hashlib.sha256(data).hexdigest().encode() + b"\r\n\r\n")
            return True
        if target.endswith("/echo-body"):
            w(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Framing: %s\r\n\r\n" % (len(body), framing.encode()))
            w(body)
            return True
        info = {
            "method": method,
            "target": target,
            "fields": fields,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_len": len(body),
            "framing": framing,
        }
        out = json.dumps(info).encode()
        w(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: X-Up-Hop\r\nX-Up-Hop: 1\r\n"
            b"Keep-Alive: timeout=5\r\nProxy-Thing: 1\r\nX-Up-Kept: yes\r\nContent-Length: %d\r\n\r\n" % len(out)
        )
        w(out)
        return True


class ProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.upstream = Upstream()

    @classmethod
    def tearDownClass(cls):
        cls.upstream.stop()

    def proxy(self, url=None, *extra):
        url = url or f"http://127.0.0.1:{self.upstream.port}"
        args = ["--workers", "1", "--upstream", url, "--upstream-timeout", "10000", "--max-body", "16777216"]
        return start_server(self, [*args, *extra])

    def request(self, server, method, target, headers=None, body=None):
        return request_once(server.port, method, target, headers=headers, body=body)

    def finish(self, server):
        self.assertEqual(self.request(server, "GET", "/ping").status, 200)
        server.stop_and_check()

    def test_a_get_is_passed_on_with_hop_fields_removed_and_forwarding_added(self):
        server = self.proxy()
        headers = {
            "Connection": "keep-alive, X-Secret",
            "X-Secret": "1",
            "Keep-Alive": "timeout=3",
            "TE": "trailers",
            "Proxy-Authorization": "Basic eA==",
            "X-Forwarded-For": "203.0.113.9",
            "X-Kept": "yes",
        }
        resp = self.request(server, "GET", "/anything?q=1", headers=headers)
        self.assertEqual(resp.status, 200, resp.body)
        info = json.loads(resp.body)
        self.assertEqual((info["method"], info["target"]), ("GET", "/anything?q=1"))
        got = lower_fields(info)
        for name in HOP_FIELDS:
            self.assertNotIn(name, got, f"{name} reached the upstream")
        self.assertEqual(got["x-kept"], "yes")
        self.assertEqual(got["x-forwarded-for"], "203.0.113.9, 127.0.0.1")
        self.assertEqual(got["x-forwarded-proto"], "http")
        self.assertEqual(got["x-forwarded-host"], "x")
        self.assertEqual(got["forwarded"], 'for=127.0.0.1;proto=http;host="x"')
        self.assertEqual(got["host"], "x")
        self.assertEqual(resp.header("X-Up-Kept"), "yes")
        for name in ("X-Up-Hop", "Keep-Alive", "Proxy-Thing"):
            self.assertIsNone(resp.header(name), f"{name} reached the client")
        self.finish(server)

    def test_bodies_go_both_ways_whole_and_streamed(self):
        server = self.proxy()
        body = os.urandom(3 << 20)
        for target in ("/echo-body", "/upstream/echo-body"):
            resp = self.request(server, "POST", target, headers={"Content-Type": "x/y"}, body=body)
            self.assertEqual(resp.status, 200, target)
            self.assertEqual(resp.body, body, target)
            self.assertEqual(resp.header("X-Framing"), f"length {len(body)}", target)
        # A chunked upload streamed on is re-framed: chunked (no length known), checked whole.
        conn = Conn(server.port)
        pieces = [body[i : i + 100000] for i in range(0, len(body), 100000)]
        raw = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        conn.sock.sendall(b"POST /upstream/echo-body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + raw)
        resp = conn.read_response()
        conn.close()
        self.assertEqual((resp.status, resp.body), (200, body))
        self.assertEqual(resp.header("X-Framing"), "chunked")
        # A chunked answer of 2 MiB with a trailer, streamed back.
        resp = self.request(server, "GET", "/bytes/2097152")
        self.assertEqual(resp.status, 200)
        self.assertEqual(len(resp.body), 2097152)
        self.finish(server)

    def test_an_http2_front_reaches_the_http1_upstream(self):
        curl = require_tool(self, "curl")
        server = self.proxy()
        out = subprocess.run(
            [curl, "-s", "--http2-prior-knowledge", "-H", "X-Kept: h2", f"http://127.0.0.1:{server.port}/h2path"],
            capture_output=True,
            timeout=30,
        )
        info = json.loads(out.stdout)
        self.assertEqual(info["target"], "/h2path")
        self.assertEqual(lower_fields(info)["x-kept"], "h2")
        data = os.urandom(1 << 20)
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            out = subprocess.run(
                [
                    curl,
                    "-s",
                    "--http2-prior-knowledge",
                    "--data-binary",
                    f"@{f.name}",
                    f"http://127.0.0.1:{server.port}/upstream/echo-body",
                ],
                capture_output=True,
                timeout=30,
            )
        self.assertEqual(out.stdout, data)
        self.finish(server)

    def test_many_requests_share_a_small_pool(self):
        before = self.upstream.connections
        server = self.proxy(None, "--upstream-pool", "8")

        def one(i):
            conn = Conn(server.port)
            try:
                for j in range(10):
                    conn.request("GET", f"/pool/{i}/{j}")
                    resp = conn.read_response()
                    if resp.status != 200:
                        return resp.status
                return 200
            finally:
                conn.close()

        with ThreadPoolExecutor(max_workers=25) as pool:
            statuses = list(pool.map(one, range(100)))
        self.assertEqual(statuses, [200] * 100)
        self.assertLessEqual(self.upstream.connections - before, 8)
        self.finish(server)

    def test_sequential_posts_reuse_one_upstream_connection(self):
        """A POST whose body was sent whole leaves its upstream connection
        reusable: 40 POSTs in turn, read whole (small and 64 KiB bodies) or
        streamed (/upstream/*), reach the upstream over one connection."""
        server = self.proxy()
        before = self.upstream.connections
        conn = Conn(server.port)
        try:
            for i in range(40):
                body = os.urandom(65536 if i % 2 else 100)
                target = f"/upstream/post/{i}" if i % 4 >= 2 else f"/post/{i}"
                conn.request("POST", target, headers={"Content-Type": "application/octet-stream"}, body=body)
                resp = conn.read_response()
                self.assertEqual(resp.status, 200)
                info = json.loads(resp.body)
                self.assertEqual(info["body_sha256"], hashlib.sha256(body).hexdigest())
        finally:
            conn.close()
        self.assertEqual(self.upstream.connections - before, 1)
        self.finish(server)

    def test_faults_are_answered_502_or_504_and_the_server_serves_on(self):
        server = self.proxy(None, *SHORT_TIMEOUT)
        for target, status, words in (
            ("/garbage", 502, "invalid response"),
            ("/huge-head", 502, "invalid response"),
            ("/reset", 502, "closed before the response ended"),
            ("/slow-head", 504, "first byte timeout"),
        ):
            resp = self.request(server, "GET", target)
            self.assertEqual(resp.status, status, target)
            self.assertIn(words, resp.body.decode(), target)
        for target in ("/close-mid", "/slow-body"):
            # The head went out: the client's connection is closed, the body short.
            conn = Conn(server.port)
            conn.sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = b""
            conn.sock.settimeout(10)
            while chunk := conn.sock.recv(65536):
                data += chunk
            conn.close()
            self.assertTrue(data.startswith(b"HTTP/1.1 200"), target)
            self.assertNotIn(b"\r\n0\r\n\r\n", data, target)
        self.finish(server)

    def test_a_refused_upstream_is_502_and_a_client_leaving_cancels(self):
        server = self.proxy(f"http://127.0.0.1:{free_port()}")
        resp = self.request(server, "GET", "/x")
        self.assertEqual(resp.status, 502)
        self.assertIn("connection refused", resp.body.decode())
        server.stop_and_check()
        # A client that leaves while the upstream is slow: nothing is answered, nothing breaks.
        server = self.proxy()
        for _ in range(5):
            conn = Conn(server.port)
            conn.sock.sendall(b"GET /slow-head HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.05)
            conn.close()
        self.finish(server)

    def test_xkit_and_nginx_as_upstreams(self):
        # The proxy routes no /static/: the backend serves it.
        site = tempfile.mkdtemp(prefix="xk-up-site-")
        self.addCleanup(shutil.rmtree, site, True)
        with open(f"{site}/a.txt", "w") as f:
            f.write("from the xKit upstream\n" * 1000)
        backend = start_server(self, ["--workers", "1", "--static", site])
        server = self.proxy(f"http://127.0.0.1:{backend.port}")
        for _ in range(3):
            resp = self.request(server, "GET", "/static/a.txt")
            self.assertEqual((resp.status, resp.body), (200, b"from the xKit upstream\n" * 1000))
        self.assertEqual(self.request(server, "GET", "/static/none").status, 404)
        server.stop_and_check()

        nginx = sbin_tool(self, "nginx")
        top = tempfile.mkdtemp(prefix="xk-nginx-up-")
        self.addCleanup(shutil.rmtree, top, True)
        os.mkdir(f"{top}/www")
        data = os.urandom(300000)
        with open(f"{top}/www/file.bin", "wb") as f:
            f.write(data)
        port = free_port()
        temps = "".join(f"{k}_temp_path {top}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(f"{top}/nginx.conf", "w") as f:
            f.write(
                ("user root;\n" if os.geteuid() == 0 else "")
                + f"daemon off;\nworker_processes 1;\npid {top}/nginx.pid;\nerror_log {top}/error.log;\n"
                "events { worker_connections 64; }\n"
                f"http {{ access_log off; {temps} keepalive_requests 1000;\n"
                f"  server {{ listen 127.0.0.1:{port}; root {top}/www; }} }}\n"
            )
        start_proxy(self, [nginx, "-p", top, "-c", f"{top}/nginx.conf", "-e", f"{top}/error.log"], port, "nginx")
        server = self.proxy(f"http://127.0.0.1:{port}")
        for _ in range(3):
            resp = self.request(server, "GET", "/file.bin")
            self.assertEqual((resp.status, resp.body), (200, data))
        self.assertEqual(self.request(server, "GET", "/missing").status, 404)
        self.finish(server)


if __name__ == "__main__":
    unittest.main()
