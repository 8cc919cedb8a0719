"""Request bodies in every framing, 100-continue, fragmented sends, and
streamed (chunked) responses, all checked byte for byte."""

import os
import random
import tempfile
import time
import unittest

from support.harness import ServerTestCase, assert_standard_headers, chunked, http_request, run_client

KIB = 1024
MIB = 1024 * KIB
SIZES = (0, 1, 100 * KIB, MIB, 64 * MIB)  # 64 MiB is the default --max-body
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def stream_body(chunks, size):
    return b"".join(bytes([ord("0") + i % 10]) * size for i in range(chunks))


class BodiesTest(ServerTestCase):
    server_args = ["--workers", "1"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # Random bytes catch truncation, reordering and text-mode mangling
        # that a repeated pattern would hide.
        cls.data = os.urandom(max(SIZES))

    def echo(self, raw):
        conn = self.connect()
        return conn.exchange(raw)

    def assert_echoed(self, resp, body):
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header("content-type"), "application/octet-stream")
        self.assertEqual(len(resp.body), len(body))
        self.assertTrue(resp.body == body, "echoed body differs from the one sent")
        assert_standard_headers(self, resp)

    def test_content_length_bodies_are_echoed_byte_for_byte(self):
        for size in SIZES:
            with self.subTest(size=size):
                body = self.data[:size]
                self.assert_echoed(self.echo(http_request("POST", "/echo", body=body)), body)

    def test_chunked_bodies_are_echoed_byte_for_byte(self):
        rng = random.Random(11)
        for size in SIZES:
            with self.subTest(size=size):
                body = self.data[:size]
                pieces = [3, 1, MIB] if size > MIB else [rng.randint(1, 70 * KIB) for _ in range(64)]
                raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(body, pieces)
                self.assert_echoed(self.echo(raw), body)

    def test_post_without_framing_has_an_empty_body(self):
        resp = self.fetch("POST", "/echo")
        self.assertEqual((resp.status, resp.body), (200, b""))
        self.assertEqual(resp.header("content-length"), "0")

    def test_chunk_extensions_and_trailers_are_accepted_and_dropped(self):
        # Includes the bad whitespace (BWS) and quoted-pairs RFC 9112 tells
        # recipients to accept.
        body = (
            b"5;foo=bar\r\nhello\r\n"
            b'1;name="quoted; \\"value\\"";flag\r\n \r\n'
            b"5 ;e = v\r\nworld\r\n"
            b"1\t;e\r\n!\r\n"
            b"0;last=1\r\nX-Trailer: one\r\nX-Other: two\r\n\r\n"
        )
        raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + body
        self.assert_echoed(self.echo(raw), b"hello world!")

    def test_chunk_sizes_accept_upper_lower_case_and_leading_zeros(self):
        body = b"A\r\n0123456789\r\na\r\nabcdefghij\r\n000F\r\nABCDEFGHIJKLMNO\r\n00\r\n\r\n"
        raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + body
        self.assert_echoed(self.echo(raw), b"0123456789abcdefghijABCDEFGHIJKLMNO")

    def test_curl_data_binary_file_round_trips(self):
        for extra in ([], ["-H", "Transfer-Encoding: chunked"]):
            with self.subTest(extra=extra), tempfile.TemporaryDirectory() as tmp:
                src, out = os.path.join(tmp, "in"), os.path.join(tmp, "out")
                with open(src, "wb") as f:
                    f.write(self.data[: MIB + 17])
                result = run_client(
                    [
                        "curl",
                        "-s",
                        "--max-time",
                        "30",
                        "-o",
                        out,
                        "-w",
                        "%{http_code}",
                        "-H",
                        "Content-Type: application/octet-stream",
                        *extra,
                        "--data-binary",
                        f"@{src}",
                        self.server.url("/echo"),
                    ]
                )
                self.assertEqual(result.returncode, 0, result.stderr.decode())
                self.assertEqual(result.stdout, b"200")
                with open(out, "rb") as f:
                    self.assertTrue(f.read() == self.data[: MIB + 17], "curl got back different bytes")

    def test_curl_expect_100_continue_gets_the_interim_response(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "in")
            with open(src, "wb") as f:
                f.write(self.data[: 100 * KIB])
            # --expect100-timeout high: without the 100 curl would wait it out.
            result = run_client(
                [
                    "curl",
                    "-sv",
                    "--max-time",
                    "30",
                    "--expect100-timeout",
                    "20",
                    "-H",
                    "Expect: 100-continue",
                    "--data-binary",
                    f"@{src}",
                    self.server.url("/echo"),
                ]
            )
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertIn("< HTTP/1.1 100 Continue", result.stderr.decode())
        self.assertTrue(result.stdout == self.data[: 100 * KIB])

    def test_expect_100_continue_is_sent_before_the_body_is_read(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Expect", "100-continue"), ("Content-Length", "5")]))
        self.assertEqual(conn.read_exactly(len(CONTINUE)), CONTINUE)
        conn.send(b"hello")
        self.assert_echoed(conn.read_response(), b"hello")

    def test_expect_100_continue_with_chunked_body(self):
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Expect", "100-continue"), ("Transfer-Encoding", "chunked")]))
        self.assertEqual(conn.read_exactly(len(CONTINUE)), CONTINUE)
        conn.send(chunked(self.data[:5000], [999]))
        self.assert_echoed(conn.read_response(), self.data[:5000])

    def test_expect_100_continue_with_the_body_already_sent_is_served(self):
        # Clients may send the body without waiting; at most one 100 may
        # precede the answer.
        conn = self.connect()
        conn.send(http_request("POST", "/echo", headers=[("Expect", "100-continue")], body=b"early"))
        resp = conn.read_final_response()
        self.assertLessEqual(len(resp.interim), 1)
        self.assertTrue(all(r.status == 100 for r in resp.interim))
        self.assert_echoed(resp, b"early")
        conn.send(http_request("GET", "/ping"))
        self.assertEqual(conn.read_response().body, b"pong")

    def test_content_length_request_in_7_byte_fragments_is_served(self):
        body = self.data[:300]
        conn = self.connect()
        conn.send_in_pieces(http_request("POST", "/echo", body=body), 7, 0.02)
        self.assert_echoed(conn.read_response(), body)

    def test_chunked_request_in_7_byte_fragments_is_served(self):
        body = self.data[:200]
        conn = self.connect()
        raw = http_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(
            body, [13, 1, 60], extension=b";e=1", trailers=b"T: v\r\n"
        )
        conn.send_in_pieces(raw, 7, 0.02)
        self.assert_echoed(conn.read_response(), body)

    def test_request_split_between_every_byte_of_the_head_is_served(self):
        conn = self.connect()
        conn.send_in_pieces(http_request("GET", "/echo?size=6", headers=[("X-A", "b")]), 1, 0.002)
        self.assertEqual(conn.read_response().body, b"xxxxxx")

    def test_stream_sends_n_chunks_of_m_digit_bytes(self):
        for chunks, size in ((5, 3), (12, 1), (3, 4096)):
            with self.subTest(chunks=chunks, size=size):
                resp = self.fetch("GET", f"/stream?chunks={chunks}&size={size}")
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.tokens("transfer-encoding"), {"chunked"})
                self.assertIsNone(resp.header("content-length"))
                self.assertEqual(resp.chunk_sizes, [size] * chunks)
                self.assertEqual(resp.body, stream_body(chunks, size))
                assert_standard_headers(self, resp)

    def test_large_stream_dechunks_to_the_expected_bytes(self):
        expected = stream_body(1000, 1000)
        resp = self.fetch("GET", "/stream?chunks=1000&size=1000")
        self.assertEqual(resp.body, expected)
        result = run_client(["curl", "-s", "--max-time", "30", self.server.url("/stream?chunks=1000&size=1000")])
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertTrue(result.stdout == expected, "curl de-chunked different bytes")

    def test_stream_keeps_the_connection_usable(self):
        conn = self.connect()
        for _ in range(3):
            conn.request("GET", "/stream?chunks=4&size=10")
            self.assertEqual(conn.read_response().body, stream_body(4, 10))
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_stream_to_http10_client_is_not_chunked(self):
        # HTTP/1.0 has no chunked coding: the body must be delimited by a
        # Content-Length or by closing the connection.
        conn = self.connect()
        conn.request("GET", "/stream?chunks=3&size=4", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
        resp = conn.read_response()
        self.assertEqual(resp.status, 200)
        self.assertNotIn("chunked", resp.tokens("transfer-encoding"))
        self.assertEqual(resp.body, stream_body(3, 4))
        if resp.close_delimited:
            self.assertNotIn("keep-alive", resp.tokens("connection"))

    def test_slow_reader_gets_the_whole_response(self):
        # Reading 16 MiB slowly forces the server through partial writes.
        conn = self.connect(rcvbuf=64 * 1024)
        conn.request("GET", "/echo?size=16777216")
        time.sleep(0.3)
        resp = conn.read_response()
        self.assertEqual(len(resp.body), 16 * MIB)
        self.assertEqual(resp.body.count(b"x"), 16 * MIB)


if __name__ == "__main__":
    unittest.main()
