"""Malformed and ambiguous requests: each must get its exact error status with
Connection: close, then the connection must close without serving anything
sent after it. Ends with abuse (garbage, vanishing clients) that must leave
the server serving with no fd leaked."""

import random
import re
import socket
import time
import unittest

from support.harness import Conn, ServerTestCase, assert_standard_headers, http_request

# Sent right behind every rejected request: if it is ever answered, the
# server resynchronised on bytes it had declared unparseable (smuggling).
FOLLOW_UP = b"GET /echo?size=13 HTTP/1.1\r\nHost: x\r\n\r\n"

POST_CHUNKED = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def get_with(*header_lines, target=b"/ping", version=b"HTTP/1.1"):
    head = b"GET " + target + b" " + version + b"\r\n"
    return head + b"".join(line + b"\r\n" for line in header_lines) + b"\r\n"


def post_with(*header_lines, body=b""):
    return b"POST /echo HTTP/1.1\r\nHost: x\r\n" + b"".join(line + b"\r\n" for line in header_lines) + b"\r\n" + body


class RejectionsTest(ServerTestCase):
    server_args = ["--workers", "1"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.baseline_fds = cls.server.settle_fd_baseline()

    @classmethod
    def tearDownClass(cls):
        # Every rejected connection must have been released.
        server, baseline = cls.server, cls.baseline_fds
        leaked = None
        if server is not None and server.is_running():
            count = server.wait_fd_count(baseline)
            if count != baseline:
                leaked = f"server holds {count} fds after the rejection tests, baseline {baseline}"
        super().tearDownClass()
        if leaked:
            raise AssertionError(leaked)

    def assert_rejected(self, raw, status, follow_up=True):
        statuses = status if isinstance(status, tuple) else (status,)
        with Conn(self.server.port) as conn:
            try:
                conn.send(raw + (FOLLOW_UP if follow_up else b""))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may close before all of it arrived
            resp = conn.read_response()
            self.assertIn(resp.status, statuses, f"request {raw[:200]!r} got {resp!r}")
            self.assertIn("close", resp.tokens("connection"), f"no Connection: close in {resp!r}")
            assert_standard_headers(self, resp)
            rest = conn.read_until_eof()
            self.assertEqual(rest, b"", f"server sent more after rejecting {raw[:200]!r}")
        self.assert_serves_ping()

    def assert_all_rejected(self, cases, status):
        for raw in cases:
            with self.subTest(request=raw[:120]):
                self.assert_rejected(raw, status)

    # ---- Body framing and smuggling ----

    def test_content_length_with_transfer_encoding_is_400(self):
        self.assert_all_rejected(
            [
                post_with(b"Content-Length: 5", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
                post_with(b"Transfer-Encoding: chunked", b"Content-Length: 5", body=b"0\r\n\r\n"),
                post_with(b"Content-Length: 0", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
            ],
            400,
        )

    def test_smuggled_request_behind_a_cl_te_conflict_is_never_served(self):
        # Read by Content-Length the body is "0\r\n\r\n"; read as chunked it
        # ends early and the rest looks like a second request. Either way it
        # must not be served.
        smuggled = b"GET /echo?size=21 HTTP/1.1\r\nHost: x\r\n\r\n"
        for raw in (
            post_with(b"Content-Length: 5", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n" + smuggled),
            post_with(
                b"Content-Length: %d" % (5 + len(smuggled)), b"Transfer-Encoding: chunked", body=b"0\r\n\r\n" + smuggled
            ),
        ):
            with self.subTest(request=raw):
                self.assert_rejected(raw, 400, follow_up=False)

    def test_differing_content_lengths_are_400(self):
        self.assert_all_rejected(
            [
                post_with(b"Content-Length: 5", b"Content-Length: 6", body=b"hello!"),
                post_with(b"Content-Length: 5, 6", body=b"hello!"),
                post_with(b"Content-Length: 6", b"Content-Length: 5", body=b"hello!"),
            ],
            400,
        )

    def test_malformed_content_length_is_400(self):
        values = (b"abc", b"-1", b"+5", b"0x5", b"5.0", b"", b"5 5", b"5a", b"1_0")
        self.assert_all_rejected([post_with(b"Content-Length: " + value, body=b"hello") for value in values], 400)

    def test_overflowing_content_length_is_rejected(self):
        # Malformed (400) or over the body limit (413) are both fair readings;
        # what matters is that it is refused and never wraps to a small length.
        self.assert_rejected(post_with(b"Content-Length: 18446744073709551621", body=b"hello"), (400, 413))

    def test_unknown_transfer_coding_is_501(self):
        self.assert_all_rejected(
            [
                post_with(b"Transfer-Encoding: " + coding, body=b"0\r\n\r\n")
                for coding in (b"gzip", b"gzip, chunked", b"deflate", b"xchunked")
            ],
            501,
        )

    def test_chunked_not_last_is_400(self):
        self.assert_all_rejected(
            [
                post_with(b"Transfer-Encoding: chunked, gzip", body=b"0\r\n\r\n"),
                post_with(b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip", body=b"0\r\n\r\n"),
            ],
            400,
        )

    def test_bad_chunk_framing_is_400(self):
        self.assert_all_rejected(
            [
                POST_CHUNKED + body
                for body in (
                    b"zz\r\nhello\r\n0\r\n\r\n",  # not hex
                    b"-5\r\nhello\r\n0\r\n\r\n",  # signed
                    b"0x5\r\nhello\r\n0\r\n\r\n",  # C-style prefix
                    b"\r\nhello\r\n0\r\n\r\n",  # empty size
                    b"5\r\nhelloXX\r\n0\r\n\r\n",  # data longer than its size
                    b"5\r\nhel\r\n0\r\n\r\n" + b"X" * 8,  # data shorter than its size
                    b"5\nhello\n0\n\n",  # bare LF framing
                    b"5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",  # trailer without colon
                )
            ],
            400,
        )

    def test_overflowing_chunk_size_is_rejected(self):
        self.assert_rejected(POST_CHUNKED + b"10000000000000005\r\nhello\r\n0\r\n\r\n", (400, 413))

    # ---- Head syntax ----

    def test_bare_cr_is_400(self):
        self.assert_all_rejected(
            [
                b"GET /ping HTTP/1.1\rHost: x\r\n\r\n",
                get_with(b"Host: x\rX-A: b"),
                get_with(b"Host: x", b"X-A: a\rb"),
                get_with(b"Host: x", b"X-A\r: b"),
            ],
            400,
        )

    def test_bare_lf_is_400(self):
        self.assert_all_rejected(
            [
                b"GET /ping HTTP/1.1\nHost: x\n\n",
                b"GET /ping HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
                b"GET /ping HTTP/1.1\r\nHost: x\r\n\n",
            ],
            400,
        )

    def test_nul_is_400(self):
        self.assert_all_rejected(
            [
                get_with(b"Host: x", b"X-A: a\x00b"),
                get_with(b"Host: x", b"X-\x00A: b"),
                get_with(b"Host: x", target=b"/pi\x00ng"),
            ],
            400,
        )

    def test_header_line_without_colon_is_400(self):
        self.assert_all_rejected([get_with(b"Host: x", b"X-No-Colon"), get_with(b"Host: x", b"X-No-Colon value")], 400)

    def test_whitespace_before_colon_is_400(self):
        self.assert_all_rejected(
            [get_with(b"Host : x"), get_with(b"Host: x", b"X-A\t: b"), post_with(b"Content-Length : 5", body=b"hello")],
            400,
        )

    def test_invalid_token_characters_are_400(self):
        self.assert_all_rejected(
            [
                get_with(b"Host: x", b"X(A): b"),
                get_with(b"Host: x", b"X A: b"),
                get_with(b"Host: x", b"X\x7fA: b"),
                get_with(b"Host: x", "X-\u00e4: b".encode()),
                get_with(b"Host: x", b": empty-name"),
                b"GE(T /ping HTTP/1.1\r\nHost: x\r\n\r\n",
                b"G\x01T /ping HTTP/1.1\r\nHost: x\r\n\r\n",
            ],
            400,
        )

    def test_control_characters_in_values_are_400(self):
        # RFC 9110 field values allow visible bytes, SP and HTAB only.
        self.assert_all_rejected([get_with(b"Host: x", b"X-A: a\x01b"), get_with(b"Host: x", b"X-A: a\x7fb")], 400)

    def test_obs_fold_is_400(self):
        self.assert_all_rejected(
            [
                get_with(b"Host: x", b"X-A: a", b" folded"),
                get_with(b"Host: x", b"X-A: a", b"\tfolded"),
                post_with(b"Transfer-Encoding:", b" chunked", body=b"0\r\n\r\n"),
            ],
            400,
        )

    def test_http11_without_exactly_one_host_is_400(self):
        self.assert_all_rejected([get_with(), get_with(b"Host: x", b"Host: y"), get_with(b"Host: x", b"host: x")], 400)

    def test_unknown_http_version_is_505(self):
        self.assert_all_rejected(
            [get_with(b"Host: x", version=version) for version in (b"HTTP/1.2", b"HTTP/2.0", b"HTTP/3.0", b"HTTP/9.9")],
            505,
        )

    def test_rejection_mid_pipeline_answers_only_the_requests_before_it(self):
        conn = self.connect()
        conn.send(
            http_request("GET", "/echo?size=1")
            + http_request("GET", "/echo?size=2")
            + get_with(b"Host: x", b"Bad Header: 1")
            + FOLLOW_UP
        )
        self.assertEqual(conn.read_response().body, b"x")
        self.assertEqual(conn.read_response().body, b"xx")
        resp = conn.read_response()
        self.assertEqual(resp.status, 400)
        self.assertIn("close", resp.tokens("connection"))
        self.assertEqual(conn.read_until_eof(), b"")

    # ---- Abuse ----

    def test_random_garbage_on_fifty_connections_leaves_server_serving(self):
        rng = random.Random(20240501)
        prefixes = (
            b"",
            b"GET / HTTP/1.1\r\n",
            b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: ",
            POST_CHUNKED,
            b"GET /ping HTTP/1.1\r\nHost: x\r\nX-A: ",
        )
        conns = []
        for i in range(50):
            conn = self.connect()
            junk = prefixes[i % len(prefixes)] + rng.randbytes(rng.randint(1, 16 * 1024))
            try:
                conn.send(junk)
                conn.sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass
            conns.append((conn, junk))
        for conn, junk in conns:
            reply = conn.read_until_eof()
            # Nothing, or one error response: never a success for garbage.
            self.assertTrue(
                reply == b"" or re.match(rb"HTTP/1\.[01] [45]\d\d ", reply),
                f"garbage {junk[:60]!r}... got {reply[:200]!r}",
            )
            conn.close()
        self.assert_serves_ping()
        self.assertEqual(self.server.wait_fd_count(self.baseline_fds), self.baseline_fds)

    def test_clients_vanishing_mid_response_leave_server_serving(self):
        for target in ("/echo?size=16777216", "/stream?chunks=20000&size=1000"):
            with self.subTest(target=target):
                for _ in range(3):
                    conn = Conn(self.server.port)
                    conn.request("GET", target)
                    conn.read_exactly(1000)
                    conn.abort()
                self.assert_serves_ping()
        self.assertEqual(self.server.wait_fd_count(self.baseline_fds), self.baseline_fds)

    def test_client_gone_before_a_delayed_response_leaves_server_serving(self):
        # The timer fires on a connection that no longer exists.
        for close in (Conn.close, Conn.abort):
            conn = Conn(self.server.port)
            conn.request("GET", "/delay?ms=100")
            time.sleep(0.02)
            close(conn)
        time.sleep(0.3)
        self.assert_serves_ping()
        self.assertEqual(self.server.wait_fd_count(self.baseline_fds), self.baseline_fds)

    def test_hundred_clients_vanishing_with_pending_delays_leave_server_serving(self):
        conns = []
        for _ in range(100):
            conn = Conn(self.server.port)
            conn.request("GET", "/delay?ms=100")
            conns.append(conn)
        time.sleep(0.02)
        for i, conn in enumerate(conns):
            conn.abort() if i % 2 else conn.close()
        time.sleep(0.3)  # every timer has fired on a connection now gone
        self.assert_serves_ping()
        self.assertEqual(self.server.wait_fd_count(self.baseline_fds), self.baseline_fds)

    def test_half_sent_requests_closed_by_the_client_leave_server_serving(self):
        for raw in (b"GET /pi", http_request("POST", "/echo", body=b"x" * 100)[:-50], POST_CHUNKED + b"5\r\nhel"):
            conn = Conn(self.server.port)
            conn.send(raw)
            conn.close()
        self.assert_serves_ping()
        self.assertEqual(self.server.wait_fd_count(self.baseline_fds), self.baseline_fds)


if __name__ == "__main__":
    unittest.main()
