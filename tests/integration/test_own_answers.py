"""The answers the server writes itself, under its user's control: the Server
field renamed, left out, or replaced by a handler's own (never two); a 404 and a
405 of the application's (the 405 with its Allow); and bodies of its own for the
4xx and 5xx the server makes (malformed, oversized, timed out, refused static
files), over HTTP/1.1 and HTTP/2, with HEAD still getting no body."""

import json
import os
import shutil
import tempfile
import unittest

from support.h2client import H2Conn
from support.harness import Conn, ServerTestCase, http_request

HTML_REFUSAL = b"<!doctype html><title>Refused</title><p>The server refused this request.\n"


def raw_exchange(port, request):
    with Conn(port) as conn:
        conn.send(request)
        return conn.read_response()


class ServerNameTest(ServerTestCase):
    server_args = ("--workers", "1", "--test-routes", "--server-name", "edge/2.1 (tested)")

    def test_every_response_carries_the_name_given(self):
        with Conn(self.server.port) as conn:
            for target in ("/ping", "/nowhere"):
                conn.request("GET", target)
                resp = conn.read_response()
                self.assertEqual(resp.header_values("server"), ["edge/2.1 (tested)"], target)
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("GET", "/ping")
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.header_values("server"), ["edge/2.1 (tested)"])

    def test_a_handler_that_sets_server_replaces_it_and_is_the_only_one(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", "/text?size=3&server=mine")
            resp = conn.read_response()
        self.assertEqual(resp.header_values("server"), ["mine"])
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("GET", "/text?size=3&server=mine")
        self.assertEqual(resp.header_values("server"), ["mine"])
        self.assertIsNotNone(resp.header("date"))  # the server's Date stays


class NoServerNameTest(ServerTestCase):
    server_args = ("--workers", "1", "--server-name", "")

    def test_an_empty_name_leaves_the_field_out(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", "/ping")
            resp = conn.read_response()
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header_values("server"), [])
        self.assertIsNotNone(resp.header("date"))
        resp = raw_exchange(self.server.port, b"GET /a HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n")
        self.assertEqual((resp.status, resp.header_values("server")), (400, []))
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("GET", "/ping")
        self.assertEqual((resp.status, resp.header_values("server")), (200, []))


class OwnAnswersTest(ServerTestCase):
    static_dir = None

    @classmethod
    def start_shared_server(cls):
        cls.static_dir = tempfile.mkdtemp(prefix="xk-own-")
        with open(os.path.join(cls.static_dir, "a.txt"), "wb") as f:
            f.write(b"0123456789")
        cls.server_args = (
            "--workers",
            "1",
            "--own-answers",
            "--max-body",
            "100",
            "--header-timeout",
            "300",
            "--static",
            cls.static_dir,
        )
        return super().start_shared_server()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.static_dir, ignore_errors=True)

    def test_no_route_is_the_applications_404_on_both_protocols(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", "/no/such/path")
            resp = conn.read_response()
        self.assertEqual((resp.status, resp.header("content-type")), (404, "application/json"))
        self.assertEqual(json.loads(resp.body), {"error": "no route", "path_bytes": len("/no/such/path")})
        self.assertEqual(resp.header_values("server"), ["xkit"])
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("GET", "/nope")
        self.assertEqual((resp.status, json.loads(resp.body)["path_bytes"]), (404, 5))

    def test_a_known_path_with_another_method_is_the_applications_405_with_allow(self):
        with Conn(self.server.port) as conn:
            conn.request("DELETE", "/ping")
            resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (405, b"not with this method\n"))
        self.assertEqual({m.strip() for m in resp.header("allow").split(",")}, {"GET", "HEAD"})
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("PUT", "/ping", body=b"")
        self.assertEqual((resp.status, resp.body), (405, b"not with this method\n"))
        self.assertIsNotNone(resp.header("allow"))

    def test_the_servers_refusals_carry_the_configured_bodies(self):
        # Any 4xx or 5xx without one of its own: the catch-all HTML.
        resp = raw_exchange(self.server.port, b"GET /a HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        self.assertEqual((resp.status, resp.header("content-type")), (400, "text/html; charset=utf-8"))
        self.assertEqual(resp.body, HTML_REFUSAL)
        # 413 has its own.
        resp = raw_exchange(self.server.port, http_request("POST", "/echo", body=b"x" * 101))
        self.assertEqual((resp.status, resp.header("content-type")), (413, "application/json"))
        self.assertEqual(json.loads(resp.body), {"error": "too large"})
        # A head that stops: the header timeout's 408.
        with Conn(self.server.port) as conn:
            conn.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
            resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (408, HTML_REFUSAL))
        # What the static handler refuses: a range past the end.
        with Conn(self.server.port) as conn:
            conn.request("GET", "/static/a.txt", headers={"Range": "bytes=50-60"})
            resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (416, HTML_REFUSAL))
        # Over HTTP/2 too.
        with H2Conn(self.server.port) as h2:
            resp = h2.fetch("POST", "/echo", body=b"y" * 200)
        self.assertEqual((resp.status, json.loads(resp.body)), (413, {"error": "too large"}))

    def test_head_gets_the_head_alone(self):
        with Conn(self.server.port) as conn:
            conn.send(b"HEAD /x HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n" + b"z" * 500)
            resp = conn.read_response(head_only=True)
            self.assertEqual(resp.status, 413)
            self.assertEqual(int(resp.header("content-length")), len(b'{"error":"too large"}\n'))
            self.assertEqual(conn.read_until_eof(5), b"")  # the head, then the close


if __name__ == "__main__":
    unittest.main()
