"""Size limits (413/414/431), connection limits, the three timeouts, and a
thousand concurrent connections with no fd left behind."""

import re
import select
import time
import unittest

from support.harness import Conn, ServerTestCase, assert_standard_headers, chunked, http_request, raise_fd_limit

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class LimitAssertions:
    def assert_refused(self, raw, status):
        """raw gets `status` with Connection: close, then the connection closes."""
        conn = self.connect()
        try:
            conn.send(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before all of it was read
        resp = conn.read_response()
        self.assertEqual(resp.status, status, resp)
        self.assertIn("close", resp.tokens("connection"))
        assert_standard_headers(self, resp)
        self.assertEqual(conn.read_until_eof(), b"")
        self.assert_serves_ping()


def headers_of_total_size(size):
    """One X-Fill header making the whole GET /ping head exactly `size` bytes."""
    base = len(http_request("GET", "/ping", headers=[("X-Fill", "")]))
    return [("X-Fill", "f" * (size - base))]


class DefaultLimitsTest(LimitAssertions, ServerTestCase):
    server_args = ["--workers", "1"]

    def test_content_length_over_64_mib_gets_413_before_the_body_is_sent(self):
        # No body follows: the answer must come from the head alone.
        self.assert_refused(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 67108865\r\n\r\n", 413)

    def test_request_line_over_8_kib_gets_414(self):
        self.assert_refused(http_request("GET", "/ping?q=" + "a" * 9000), 414)

    def test_request_line_just_under_8_kib_is_served(self):
        resp = self.fetch("GET", "/ping?q=" + "a" * 8000)
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_head_over_8_kib_gets_431(self):
        self.assert_refused(http_request("GET", "/ping", headers=headers_of_total_size(8192 + 200)), 431)

    def test_head_just_under_8_kib_is_served(self):
        resp = self.fetch("GET", "/ping", headers=headers_of_total_size(8192 - 200))
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_many_small_header_lines_over_8_kib_get_431(self):
        headers = [(f"X-{i}", "v" * 100) for i in range(95)]  # ~10 KiB, under 100 fields
        self.assert_refused(http_request("GET", "/ping", headers=headers), 431)

    def test_hundred_header_fields_are_served(self):
        headers = [(f"X-{i}", "v") for i in range(99)]  # plus Host
        resp = self.fetch("GET", "/ping", headers=headers)
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_hundred_and_one_header_fields_get_431(self):
        headers = [(f"X-{i}", "v") for i in range(100)]  # plus Host
        self.assert_refused(http_request("GET", "/ping", headers=headers), 431)


class ConfiguredLimitsTest(LimitAssertions, ServerTestCase):
    server_args = ["--workers", "1", "--max-body", "1000", "--max-header-size", "2048"]

    def test_body_of_exactly_max_body_is_echoed(self):
        for framing in ("content-length", "chunked"):
            with self.subTest(framing=framing):
                body = bytes(range(250)) * 4
                if framing == "chunked":
                    raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(
                        body, [300]
                    )
                else:
                    raw = http_request("POST", "/echo", body=body)
                with Conn(self.server.port) as conn:
                    conn.send(raw)
                    resp = conn.read_response()
                self.assertEqual((resp.status, resp.body), (200, body))

    def test_content_length_over_max_body_gets_413(self):
        self.assert_refused(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", 413)

    def test_chunked_body_over_max_body_gets_413(self):
        raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(b"b" * 1200, [600])
        self.assert_refused(raw, 413)

    def test_expect_100_continue_over_max_body_gets_413_without_100(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Expect", "100-continue"), ("Content-Length", "5000")]))
        resp = conn.read_response()
        self.assertEqual(resp.status, 413, "expected 413 straight away, not a 100 first")
        self.assertIn("close", resp.tokens("connection"))
        self.assertEqual(conn.read_until_eof(), b"")

    def test_expect_100_continue_within_max_body_gets_100(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Expect", "100-continue"), ("Content-Length", "1000")]))
        self.assertEqual(conn.read_exactly(len(CONTINUE)), CONTINUE)
        conn.send(b"c" * 1000)
        self.assertEqual(conn.read_response().body, b"c" * 1000)

    def test_head_under_max_header_size_is_served(self):
        resp = self.fetch("GET", "/ping", headers=headers_of_total_size(2048 - 100))
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_head_over_max_header_size_gets_431(self):
        self.assert_refused(http_request("GET", "/ping", headers=headers_of_total_size(2048 + 100)), 431)


class Http2OnlyTimeoutsTest(ServerTestCase):
    """A cleartext HTTP/2-only server waits for a connection's first bytes
    under the header timeout, as an HTTP/1.1 server does, not the idle one."""

    HEADER, SLACK = 0.5, 2.0
    server_args = ["--workers", "1", "--http2-only", "--idle-timeout", "30000", "--header-timeout", "500"]

    def test_silent_connection_is_closed_after_header_timeout(self):
        conn = self.connect()
        started = time.monotonic()
        self.assertEqual(conn.read_until_eof(self.HEADER + self.SLACK), b"")
        self.assertGreaterEqual(time.monotonic() - started, self.HEADER * 0.8)


class TimeoutsTest(ServerTestCase):
    IDLE, HEADER, BODY = 0.3, 0.5, 0.5
    server_args = ["--workers", "1", "--idle-timeout", "300", "--header-timeout", "500", "--body-timeout", "500"]
    # Timers may fire late on a loaded ASan build, never much early.
    SLACK = 2.0

    def assert_closed_by_timeout(self, conn, started, timeout, allow_408):
        """The server closes within timeout+SLACK, not long before timeout,
        sending nothing or (when allowed) one 408."""
        rest = conn.read_until_eof(timeout + self.SLACK)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, timeout * 0.8, f"closed after {elapsed:.2f}s, before its timeout")
        if rest:
            self.assertTrue(allow_408, f"idle connection got bytes before closing: {rest[:200]!r}")
            self.assertRegex(rest, re.compile(rb"^HTTP/1\.1 408 .*\r\nconnection: close\r\n", re.I | re.S))
        return rest

    def test_idle_keepalive_connection_is_closed_after_idle_timeout(self):
        conn = self.connect()
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")
        self.assert_closed_by_timeout(conn, time.monotonic(), self.IDLE, allow_408=False)

    def test_connection_that_never_sends_is_closed(self):
        conn = self.connect()
        started = time.monotonic()
        rest = conn.read_until_eof(max(self.IDLE, self.HEADER) + self.SLACK)
        self.assertEqual(rest, b"")
        self.assertGreaterEqual(time.monotonic() - started, self.IDLE * 0.8)

    def test_idle_timer_restarts_after_every_request(self):
        # Eight requests 100 ms apart outlast the 300 ms idle timeout in total.
        conn = self.connect()
        for _ in range(8):
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
            time.sleep(0.1)
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_partial_head_is_closed_after_header_timeout(self):
        conn = self.connect()
        conn.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
        self.assert_closed_by_timeout(conn, time.monotonic(), self.HEADER, allow_408=True)

    def test_head_trickled_a_byte_at_a_time_is_closed_after_header_timeout(self):
        # Slowloris: each byte would reset a per-read timer; the header
        # timeout must bound the whole head.
        conn = self.connect()
        started = time.monotonic()
        payload = b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 1000
        for byte in payload:
            try:
                conn.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            readable, _, _ = select.select([conn.sock], [], [], 0.05)
            if readable or time.monotonic() - started > self.HEADER + self.SLACK:
                break
        conn.read_until_eof(self.SLACK)
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, self.HEADER + self.SLACK, "a trickled head kept the connection open")
        self.assertGreaterEqual(elapsed, self.HEADER * 0.8)

    def test_hundred_slowloris_connections_are_all_closed_and_released(self):
        baseline = self.server.settle_fd_baseline()
        conns = [self.connect() for _ in range(100)]
        for conn in conns:
            conn.send(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        started = time.monotonic()
        for conn in conns:
            conn.read_until_eof(max(0.1, started + self.HEADER + self.SLACK - time.monotonic()))
        self.assertEqual(self.server.wait_fd_count(baseline), baseline)

    def test_stalled_content_length_body_is_closed_after_body_timeout(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Content-Length", "100")]) + b"b" * 10)
        self.assert_closed_by_timeout(conn, time.monotonic(), self.BODY, allow_408=True)

    def test_stalled_chunked_body_is_closed_after_body_timeout(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + b"a\r\n01234")
        self.assert_closed_by_timeout(conn, time.monotonic(), self.BODY, allow_408=True)

    def test_slow_but_steady_body_is_served(self):
        # 200 ms gaps stay under the 500 ms body timeout though the whole
        # body takes over a second.
        body = b"0123456789" * 6
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Content-Length", str(len(body)))]))
        conn.send_in_pieces(body, 10, 0.2)
        self.assertEqual(conn.read_response().body, body)

    def test_pending_delay_is_not_cut_by_the_idle_timeout(self):
        conn = self.connect()
        conn.request("GET", "/delay?ms=900")
        resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"done"))
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_slow_reader_is_not_cut_by_the_idle_timeout(self):
        # A small receive buffer keeps most of the 16 MiB in the server,
        # blocked on a full socket, while the client pauses.
        conn = self.connect(rcvbuf=64 * 1024)
        conn.request("GET", "/echo?size=16777216")
        time.sleep(0.8)
        self.assertEqual(len(conn.read_response().body), 16777216)


class ManyConnectionsTest(ServerTestCase):
    CONNECTIONS = 1000
    server_args = ["--workers", "2"]

    @classmethod
    def setUpClass(cls):
        # Both this process and the server (which inherits it) need the fds.
        raise_fd_limit(4 * cls.CONNECTIONS)
        super().setUpClass()

    def test_thousand_concurrent_connections_are_all_answered_and_released(self):
        baseline = self.server.settle_fd_baseline()
        conns = []
        try:
            for i in range(self.CONNECTIONS):
                conn = Conn(self.server.port)
                conns.append(conn)
                conn.request("GET", f"/echo?size={i % 97}")
            self.assertEqual(
                self.server.wait_fd_count(baseline + self.CONNECTIONS),
                baseline + self.CONNECTIONS,
                "the connections were not all open at once",
            )
            for i, conn in enumerate(conns):
                resp = conn.read_response()
                self.assertEqual((resp.status, resp.body), (200, b"x" * (i % 97)), f"connection {i}")
        finally:
            for conn in conns:
                conn.close()
        self.assertEqual(self.server.wait_fd_count(baseline, timeout=10), baseline)
        self.assert_serves_ping()


class MaxConnectionsTest(ServerTestCase):
    server_args = ["--workers", "1", "--max-connections", "10"]

    def test_connections_beyond_max_are_closed_until_one_frees_up(self):
        held = []
        for _ in range(10):
            conn = self.connect()
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
            held.append(conn)
        extra = self.connect()
        try:
            extra.request("GET", "/ping")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.assertEqual(extra.read_until_eof(3), b"", "the eleventh connection was served")
        held.pop().close()
        # The close reaches the server asynchronously; retry briefly.
        deadline = time.monotonic() + 3
        while True:
            with Conn(self.server.port) as conn:
                try:
                    conn.request("GET", "/ping")
                    resp = conn.read_response()
                    self.assertEqual(resp.body, b"pong")
                    break
                except (AssertionError, ConnectionResetError, BrokenPipeError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        for conn in held:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")


if __name__ == "__main__":
    unittest.main()
