"""The proxy's auth subrequest (xHttpProxyConf.auth_url, the bench server's
--upstream-auth): every proxied request first asks an auth service, a small
Python server of the test's own that decides by the Authorization field and
records what it was asked.

Checked: a good token lets the request through with X-User-Id from the
service's answer (a client's own X-User-Id never reaches the upstream), with
its body (read whole, and streamed) intact; the service sees the method, the
original URI and fields but no body; no token is 401 with the service's
WWW-Authenticate, a forbidden one 403, and neither reaches the upstream; a
service answering 500 is 502; a service that is down or too slow is 503.
Nothing is cached: each request asks again."""

import hashlib
import json
import socket
import socketserver
import time
import unittest

from support.harness import request_once, start_server
from support.upstream import LoopbackServer, lower_fields, read_body, read_head
from test_upstream_proxy import Upstream


class AuthService(LoopbackServer):
    """The auth service on a free loopback port; .asked lists what it was asked."""

    def __init__(self):
        self.asked = []
        super().__init__(AuthHandler)


class AuthHandler(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            method, target, fields = read_head(self.rfile)
            if method is None:
                return
            body, _ = read_body(self.rfile, fields)
            lower = {n.lower(): v for n, v in fields}
            self.server.asked.append({"method": method, "target": target, "fields": lower, "body": body})
            token = lower.get("authorization", "")
            if token == "Bearer good":
                self.answer(200, b"X-User-Id: 42\r\nX-Other: no\r\n")
            elif token == "Bearer forbidden":
                self.answer(403, b"")
            elif token == "Bearer broken":
                self.answer(500, b"")
            elif token == "Bearer slow":
                time.sleep(2)
                return
            else:
                self.answer(401, b'WWW-Authenticate: Bearer realm="xkit"\r\n')

    def answer(self, status, extra):
        body = b"auth says %d" % status
        self.wfile.write(b"HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s" % (status, extra, len(body), body))
        self.wfile.flush()


class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.upstream = Upstream()
        cls.auth = AuthService()

    @classmethod
    def tearDownClass(cls):
        cls.upstream.stop()
        cls.auth.stop()

    def proxy(self, auth_url=None, extra=()):
        auth_url = auth_url or f"http://127.0.0.1:{self.auth.port}"
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        args += ["--upstream-timeout", "1000", "--max-body", "16777216"]
        args += ["--upstream-auth", auth_url, "--upstream-auth-copy", "X-User-Id", *extra]
        return start_server(self, args)

    def request(self, server, method, target, headers=None, body=None):
        return request_once(server.port, method, target, headers=headers, body=body)

    def test_a_good_token_passes_with_the_user_id(self):
        server = self.proxy()
        body = bytes(range(256)) * 4096  # 1 MiB
        for target in ("/api/thing?x=1", "/upstream/thing?x=1"):  # read whole, then streamed
            with self.subTest(target=target):
                del self.auth.asked[:]
                headers = {"Authorization": "Bearer good", "X-User-Id": "1", "X-Original-URI": "/forged"}
                resp = self.request(server, "POST", target, headers=headers, body=body)
                self.assertEqual(resp.status, 200, resp.body)
                info = json.loads(resp.body)
                got = lower_fields(info)
                self.assertEqual(got["x-user-id"], "42")
                self.assertEqual([n for n, _ in info["fields"] if n.lower() == "x-user-id"], ["X-User-Id"])
                self.assertNotIn("x-other", got)
                self.assertNotIn("x-original-uri", got)
                self.assertEqual(info["body_sha256"], hashlib.sha256(body).hexdigest())
                (asked,) = self.auth.asked
                self.assertEqual((asked["method"], asked["target"]), ("POST", target))
                self.assertEqual(asked["fields"]["x-original-uri"], target)
                self.assertEqual(asked["fields"]["x-original-method"], "POST")
                self.assertEqual(asked["fields"]["authorization"], "Bearer good")
                self.assertNotIn("x-user-id", asked["fields"])
                self.assertEqual(asked["body"], b"")
        server.stop_and_check()

    def test_a_set_method_and_target_ask_as_nginx_auth_request_does(self):
        # The HttpArena's auth service answers GET /_auth only: a POST is asked as GET of that.
        server = self.proxy(extra=["--upstream-auth-method", "GET", "--upstream-auth-target", "/_auth"])
        del self.auth.asked[:]
        resp = self.request(server, "POST", "/api/items/2?x=1", headers={"Authorization": "Bearer good"}, body=b"{}")
        self.assertEqual(resp.status, 200, resp.body)
        info = json.loads(resp.body)
        self.assertEqual((info["method"], lower_fields(info)["x-user-id"]), ("POST", "42"))
        (asked,) = self.auth.asked
        self.assertEqual((asked["method"], asked["target"], asked["body"]), ("GET", "/_auth", b""))
        self.assertEqual(asked["fields"]["x-original-method"], "POST")
        self.assertEqual(asked["fields"]["x-original-uri"], "/api/items/2?x=1")
        resp = self.request(server, "POST", "/api/items/2", body=b"{}")
        self.assertEqual(resp.status, 401, resp.body)
        server.stop_and_check()

    def test_refusals_are_the_clients_answer_and_reach_no_upstream(self):
        server = self.proxy()
        before = self.upstream.connections
        resp = self.request(server, "GET", "/api/thing")
        self.assertEqual(resp.status, 401, resp.body)
        self.assertEqual(resp.header_values("www-authenticate"), ['Bearer realm="xkit"'])
        resp = self.request(server, "GET", "/api/thing", headers={"Authorization": "Bearer forbidden"})
        self.assertEqual(resp.status, 403, resp.body)
        forbidden = {"Authorization": "Bearer forbidden"}
        resp = self.request(server, "POST", "/upstream/x", headers=forbidden, body=b"y" * 300000)
        self.assertEqual(resp.status, 403, resp.body)
        self.assertEqual(self.upstream.connections, before)
        for _ in range(10):  # a streamed body refused: the front stops reading it before the answer
            resp = self.request(server, "POST", "/upstream/x", headers=forbidden, body=b"y" * 300000)
            self.assertEqual(resp.status, 403, resp.body)
            resp = self.request(server, "GET", "/api/thing", headers={"Authorization": "Bearer good"})
            self.assertEqual(resp.status, 200, resp.body)
        asked = len(self.auth.asked)
        for _ in range(3):  # nothing cached
            self.request(server, "GET", "/api/thing", headers={"Authorization": "Bearer good"})
        self.assertEqual(len(self.auth.asked), asked + 3)
        server.stop_and_check()

    def test_a_misbehaving_or_missing_service(self):
        server = self.proxy()
        resp = self.request(server, "GET", "/api/thing", headers={"Authorization": "Bearer broken"})
        self.assertEqual(resp.status, 502, resp.body)
        self.assertIn(b"answered 500", resp.body)
        start = time.monotonic()
        resp = self.request(server, "GET", "/api/thing", headers={"Authorization": "Bearer slow"})
        self.assertEqual(resp.status, 503, resp.body)
        self.assertLess(time.monotonic() - start, 1.9)
        server.stop_and_check()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
        probe.close()
        down = self.proxy(f"http://127.0.0.1:{closed_port}")
        resp = self.request(down, "GET", "/api/thing", headers={"Authorization": "Bearer good"})
        self.assertEqual(resp.status, 503, resp.body)
        self.assertIn(b"connection refused", resp.body)
        self.assertEqual(self.request(down, "GET", "/ping").status, 200)
        down.stop_and_check()


if __name__ == "__main__":
    unittest.main()
