"""Routes, status codes and headers as a user of the bench server sees them."""

import os
import socket
import time
import unittest

from support.harness import (
    Conn,
    ServerTestCase,
    assert_standard_headers,
    hello_server_path,
    http_request,
    ipv6_loopback_or_skip,
    run_client,
    start_server,
)


class RoutesTest(ServerTestCase):
    # One worker, so a pending /delay and a /ping share a loop (see the delay test).
    server_args = ["--workers", "1"]

    def test_listening_line_reports_the_chosen_port_and_workers(self):
        self.assertNotEqual(self.server.port, 0)
        self.assertEqual(self.server.workers, 1)
        self.assertEqual(self.server.host, "0.0.0.0")

    def test_ping_answers_pong_as_text_plain(self):
        resp = self.fetch("GET", "/ping")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.body, b"pong")
        self.assertEqual(resp.header("content-length"), "4")
        self.assertTrue(resp.header("content-type").startswith("text/plain"), resp.header("content-type"))
        assert_standard_headers(self, resp)

    def test_query_string_does_not_change_the_route(self):
        resp = self.fetch("GET", "/ping?verbose=1&x")
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_echo_get_returns_size_bytes_of_x(self):
        for size in (0, 1, 1000, 65537, 16 * 1024 * 1024):
            with self.subTest(size=size):
                resp = self.fetch("GET", f"/echo?size={size}")
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.header("content-type"), "application/octet-stream")
                self.assertEqual(resp.header("content-length"), str(size))
                self.assertEqual(len(resp.body), size)
                self.assertEqual(resp.body, b"x" * size)

    def test_echo_get_rejects_missing_negative_non_numeric_and_too_large_sizes(self):
        for query in (
            "",
            "?",
            "?size=",
            "?other=5",
            "?size=-1",
            "?size=abc",
            "?size=12abc",
            "?size=0x10",
            "?size=1e3",
            "?size=16777217",
            "?size=99999999999999999999999",
        ):
            with self.subTest(query=query):
                resp = self.fetch("GET", f"/echo{query}")
                self.assertEqual(resp.status, 400, resp)
                assert_standard_headers(self, resp)

    def test_root_lists_routes_for_get_and_post(self):
        for method in ("GET", "POST"):
            with self.subTest(method=method):
                resp = self.fetch(method, "/", body=b"" if method == "POST" else None)
                self.assertEqual(resp.status, 200)
                self.assertIn(b"/ping", resp.body)
                self.assertIn(b"/echo", resp.body)
                assert_standard_headers(self, resp)

    def test_unknown_paths_are_404(self):
        for target in ("/nope", "/pingx", "/ping/extra", "/ECHO", "/echo/1"):
            with self.subTest(target=target):
                resp = self.fetch("GET", target)
                self.assertEqual(resp.status, 404, resp)
                assert_standard_headers(self, resp)

    def test_wrong_method_is_405_with_allow_listing_the_route_methods(self):
        cases = [
            ("DELETE", "/ping", {"get", "head"}),
            ("POST", "/ping", {"get", "head"}),
            ("PUT", "/echo", {"get", "head", "post"}),
            ("DELETE", "/", {"get", "head", "post"}),
            ("POST", "/delay?ms=1", {"get", "head"}),
            ("PATCH", "/stream", {"get", "head"}),
        ]
        for method, target, allowed in cases:
            with self.subTest(method=method, target=target):
                resp = self.fetch(method, target, body=b"" if method != "DELETE" else None)
                self.assertEqual(resp.status, 405, resp)
                self.assertEqual(resp.tokens("allow"), allowed)
                assert_standard_headers(self, resp)

    def test_head_gets_the_get_headers_without_a_body(self):
        for target in ("/ping", "/echo?size=1000", "/"):
            with self.subTest(target=target):
                conn = self.connect()
                conn.request("GET", target)
                get = conn.read_response()
                conn.request("HEAD", target)
                head = conn.read_response(head_only=True)
                # A body after the HEAD head would be parsed as the next
                # status line here and fail.
                conn.request("GET", "/ping")
                after = conn.read_response()
                self.assertEqual(head.status, 200)
                self.assertEqual(head.header("content-length"), get.header("content-length"))
                self.assertEqual(head.header("content-type"), get.header("content-type"))
                self.assertEqual(
                    {n.lower() for n, _ in head.headers} - {"date"}, {n.lower() for n, _ in get.headers} - {"date"}
                )
                self.assertEqual((after.status, after.body), (200, b"pong"))

    def test_head_of_error_responses_sends_no_body(self):
        for target, status in (("/nope", 404), ("/echo?size=abc", 400)):
            with self.subTest(target=target):
                conn = self.connect()
                conn.request("HEAD", target)
                head = conn.read_response(head_only=True)
                self.assertEqual(head.status, status)
                conn.request("GET", "/ping")
                self.assertEqual(conn.read_response().body, b"pong")

    def test_head_of_streamed_route_sends_no_body(self):
        conn = self.connect()
        conn.request("HEAD", "/stream?chunks=3&size=5")
        head = conn.read_response(head_only=True)
        self.assertEqual(head.status, 200)
        conn.request("GET", "/ping")
        after = conn.read_response()
        self.assertEqual((after.status, after.body), (200, b"pong"))

    def test_legal_but_unusual_header_values_are_accepted(self):
        # RFC 9110 field values: visible bytes, obs-text (UTF-8 here), SP and
        # HTAB inside, optional whitespace around.
        resp = self.fetch(
            "GET",
            "/ping",
            headers=[
                ("X-Name", "J\u00fcrgen".encode()),
                ("X-Tab", b"a\tb"),
                ("X-Pad", b"  padded\t "),
                ("X-Empty", b""),
                ("x-lower-case", b"v"),
            ],
        )
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_error_responses_carry_date_server_and_length(self):
        for method, target in (("GET", "/missing"), ("DELETE", "/ping"), ("GET", "/echo?size=x")):
            with self.subTest(method=method, target=target):
                resp = self.fetch(method, target)
                assert_standard_headers(self, resp)
                self.assertGreaterEqual(resp.status, 400)

    def test_date_header_follows_the_clock(self):
        first = self.fetch("GET", "/ping").header("date")
        time.sleep(1.1)
        second = self.fetch("GET", "/ping").header("date")
        self.assertNotEqual(first, second, "Date did not advance after more than a second")

    def test_delay_answers_done_after_the_delay(self):
        started = time.monotonic()
        resp = self.fetch("GET", "/delay?ms=300")
        elapsed = time.monotonic() - started
        self.assertEqual((resp.status, resp.body), (200, b"done"))
        self.assertGreaterEqual(elapsed, 0.29)
        self.assertLess(elapsed, 3.0)
        assert_standard_headers(self, resp)

    def test_pending_delay_does_not_block_other_connections(self):
        slow = self.connect()
        slow.request("GET", "/delay?ms=1500")
        started = time.monotonic()
        self.assert_serves_ping()
        self.assertLess(time.monotonic() - started, 1.0, "a pending /delay blocked the worker")
        self.assertEqual(slow.read_response().body, b"done")

    def test_delay_rejects_bad_and_too_long_delays(self):
        for query in ("", "?ms=", "?ms=abc", "?ms=-5", "?ms=60001"):
            with self.subTest(query=query):
                self.assertEqual(self.fetch("GET", f"/delay{query}").status, 400)

    def test_curl_verbose_shows_a_complete_exchange(self):
        result = run_client(["curl", "-sv", "--max-time", "10", self.server.url("/ping")])
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertEqual(result.stdout, b"pong")
        err = result.stderr.decode()
        self.assertIn("< HTTP/1.1 200", err)
        self.assertIn("< Server: xkit", err)
        self.assertIn("< Content-Length: 4", err)

    def test_curl_http10_gets_pong(self):
        result = run_client(["curl", "-s", "--http1.0", "--max-time", "10", self.server.url("/ping")])
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertEqual(result.stdout, b"pong")

    def test_http10_without_host_is_served_and_closed(self):
        conn = self.connect()
        conn.request("GET", "/ping", version="HTTP/1.0")
        resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
        self.assertNotIn("keep-alive", resp.tokens("connection"))
        assert_standard_headers(self, resp)
        self.assertEqual(conn.read_until_eof(), b"")

    def test_http10_keepalive_is_confirmed_and_kept(self):
        conn = self.connect()
        for _ in range(3):
            conn.request("GET", "/ping", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            self.assertIn("keep-alive", resp.tokens("connection"))

    def test_http11_keeps_the_connection_alive_by_default(self):
        conn = self.connect()
        for _ in range(3):
            conn.request("GET", "/ping")
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            self.assertNotIn("close", resp.tokens("connection"))
        self.assertTrue(conn.stays_open_for(0.2))

    def test_connection_close_is_echoed_and_the_server_closes(self):
        for value in ("close", "Close", "keep-alive, close"):
            with self.subTest(value=value):
                conn = self.connect()
                conn.request("GET", "/ping", headers=[("Connection", value)])
                resp = conn.read_response()
                self.assertEqual((resp.status, resp.body), (200, b"pong"))
                self.assertEqual(resp.tokens("connection"), {"close"})
                self.assertEqual(conn.read_until_eof(), b"")


class ServerOptionsTest(unittest.TestCase):
    """Command-line behaviour that needs a server of its own per case."""

    def assert_pings_then_stops(self, server, host="127.0.0.1"):
        with Conn(server.port, host) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()

    def test_workers_option_is_reported(self):
        server = start_server(self, ["--workers", "3"])
        self.assertEqual(server.workers, 3)
        self.assert_pings_then_stops(server)

    def test_default_workers_match_the_usable_cpus(self):
        server = start_server(self, [])
        self.assertEqual(server.workers, len(os.sched_getaffinity(0)))
        self.assert_pings_then_stops(server)

    def test_default_workers_follow_the_affinity_mask_not_the_machine(self):
        # As `taskset -c N` would: the child inherits this process's mask.
        everything = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(everything)})
        try:
            server = start_server(self, [])
        finally:
            os.sched_setaffinity(0, everything)
        self.assertEqual(server.workers, 1)
        self.assert_pings_then_stops(server)

    def test_explicit_port_is_used(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = start_server(self, ["--workers", "1"], port=port)
        self.assertEqual(server.port, port)
        self.assert_pings_then_stops(server)

    def test_ipv6_loopback_host_serves(self):
        ipv6_loopback_or_skip(self)
        server = start_server(self, ["--workers", "1", "--host", "::1"])
        self.assertEqual(server.host, "::1")
        with Conn(server.port, "::1") as conn:
            conn.request("GET", "/ping", host="[::1]")
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            assert_standard_headers(self, resp)
        # Bound to ::1 only: IPv4 loopback must not reach it.
        with self.assertRaises(ConnectionRefusedError):
            Conn(server.port, "127.0.0.1").close()
        result = run_client(["curl", "-s", "-g", "--max-time", "10", server.url("/echo?size=3")])
        self.assertEqual(result.stdout, b"xxx")
        server.stop_and_check()

    def test_ipv4_loopback_host_binds_only_there(self):
        server = start_server(self, ["--workers", "1", "--host", "127.0.0.1"])
        self.assertEqual(server.host, "127.0.0.1")
        self.assert_pings_then_stops(server, "127.0.0.1")


class HelloExampleTest(unittest.TestCase):
    def setUp(self):
        self.server = start_server(self, binary=hello_server_path())

    def fetch(self, target):
        with Conn(self.server.port, self.server.connect_host) as conn:
            conn.request("GET", target)
            return conn.read_response()

    def test_hello_greets_the_name_from_the_path(self):
        for name in ("world", "xKit", "a-b_c.9"):
            with self.subTest(name=name):
                resp = self.fetch(f"/hello/{name}")
                self.assertEqual(resp.status, 200)
                # A trailing newline (friendly to curl in a terminal) is fine.
                self.assertIn(resp.body, (f"Hello, {name}!".encode(), f"Hello, {name}!\n".encode()))
                assert_standard_headers(self, resp)
        self.server.stop_and_check()

    def test_param_survives_a_body_that_moves_the_request(self):
        # A request with a body is routed at its head; the body then grows the
        # read buffer (and a pipelined request before it makes the head move to
        # the front), and the handler must still see the parameter's bytes.
        body = b"b" * (300 << 10)
        with Conn(self.server.port, self.server.connect_host) as conn:
            conn.send(http_request("GET", "/hello/first") + http_request("GET", "/hello/moved-name", body=body))
            first, second = conn.read_response(), conn.read_response()
        self.assertEqual(first.body.rstrip(b"\n"), b"Hello, first!")
        self.assertEqual(second.status, 200)
        self.assertEqual(second.body.rstrip(b"\n"), b"Hello, moved-name!")
        self.server.stop_and_check()

    def test_hello_param_matches_one_segment_only(self):
        for target in ("/hello", "/hello/a/b", "/nothello/x"):
            with self.subTest(target=target):
                self.assertEqual(self.fetch(target).status, 404)
        self.server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
