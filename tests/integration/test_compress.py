"""On-the-fly compression (http_bench_server --compress) as clients see it:
gzip or Brotli chosen by Accept-Encoding's q-values, Vary, only listed types
above the size threshold, never for HEAD, 204, 206, 304 or a body the handler
encoded itself or marked no-transform, strong ETags made weak, off per response and per route, and
streamed bodies that decode piece by piece as they are written, over
HTTP/1.1, h2c and TLS."""

import gzip
import unittest
import zlib

import brotli

from support.h2client import H2Conn
from support.harness import Conn, ServerTestCase, run_client
from support.tls_fixtures import HttpsTestCase, client_context, curl_https, h2_over_tls, shared_certs

setUpModule, tearDownModule = shared_certs(__name__)

# The drip's pause between lines: long enough that a line the client decodes
# within it was flushed on its own, not with the next one.
DRIP_MS = 600


def decode(coding, body):
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "br":
        return brotli.decompress(body)
    if coding is None:
        return body
    raise AssertionError(f"unexpected Content-Encoding {coding!r}")


class Incremental:
    """Decodes a coded stream as its bytes arrive."""

    def __init__(self, coding):
        self.inflate = zlib.decompressobj(16 + 15) if coding == "gzip" else brotli.Decompressor()
        self.coding = coding
        self.text = b""

    def feed(self, data):
        self.text += self.inflate.decompress(data) if self.coding == "gzip" else self.inflate.process(data)
        return self.text


def first_line_alone(test, text):
    """The first line decoded before the drip wrote the second."""
    test.assertIn(b"piece 1 of 3:", text)
    test.assertNotIn(b"piece 2", text)


class CompressHttp1Test(ServerTestCase):
    server_args = ("--compress", "--workers", "1")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with Conn(cls.server.port) as conn:
            conn.request("GET", "/json")
            cls.json = conn.read_response().body

    def get(self, target, accept=None, method="GET", headers=()):
        headers = list(headers)
        if accept is not None:
            headers.append(("Accept-Encoding", accept))
        return self.fetch(method, target, headers=headers)

    def assert_coded(self, resp, coding, identity):
        self.assertEqual(resp.header("content-encoding"), coding)
        self.assertEqual(decode(coding, resp.body), identity)
        if coding:
            self.assertLess(len(resp.body), len(identity))

    def test_curl_compressed_gets_brotli_and_the_same_document(self):
        result = run_client(["curl", "-sS", "--compressed", "-D", "/dev/stderr", self.server.url("/json")])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(b"content-encoding: br", result.stderr.lower())
        self.assertEqual(result.stdout, self.json)
        self.assertGreater(len(self.json), 8000)

    def test_q_values_choose_the_coding(self):
        cases = [
            (None, None),
            ("", None),
            ("identity", None),
            ("deflate", None),
            ("x-gzip", None),
            ("gzip", "gzip"),
            ("br", "br"),
            ("gzip, br", "br"),
            ("GZIP", "gzip"),
            ("br;q=0.5, gzip", "gzip"),
            ("br;q=0.5, gzip;q=0.5", "br"),
            ("br;q=0, gzip;q=0.1", "gzip"),
            ("gzip;q=0, br;q=0", None),
            ("*", "br"),
            ("*;q=0.5, br;q=0", "gzip"),
            ("*;q=0", None),
            ("br;q=0.001", "br"),
            ("gzip;q=2, br;q=x", None),
            ("deflate, gzip, br, zstd", "br"),
        ]
        for accept, coding in cases:
            with self.subTest(accept=accept):
                resp = self.get("/json", accept)
                self.assert_coded(resp, coding, self.json)
                self.assertEqual(resp.header("vary"), "Accept-Encoding")

    def test_listed_types_are_compressed_whatever_their_case_and_parameters(self):
        identity = self.get("/text?size=3000").body
        for media_type in (
            "text/plain",
            "text/html",
            "TEXT/CSS",
            "application/json;charset=utf-8",
            "image/svg+xml",
            "application/javascript",
        ):
            with self.subTest(media_type=media_type):
                resp = self.get(f"/text?size=3000&type={media_type}", "gzip")
                self.assert_coded(resp, "gzip", identity)

    def test_other_types_are_not_compressed_and_do_not_vary(self):
        for media_type in ("image/png", "application/octet-stream", "video/mp4", "textual/plain"):
            with self.subTest(media_type=media_type):
                resp = self.get(f"/text?size=3000&type={media_type}", "gzip, br")
                self.assertIsNone(resp.header("content-encoding"))
                self.assertIsNone(resp.header("vary"))
                self.assertEqual(len(resp.body), 3000)

    def test_whole_bodies_of_every_size_decode_to_themselves(self):
        # Brotli's encoder for a whole body lives in the worker's arena up to about 30 KB
        # and spills into malloc beyond: both sides, alternated with gzip on one worker.
        for size in (256, 3000, 30000, 65536, 3000):
            identity = self.get(f"/text?size={size}").body
            self.assertEqual(len(identity), size)
            for coding in ("br", "gzip"):
                with self.subTest(size=size, coding=coding):
                    self.assert_coded(self.get(f"/text?size={size}", coding), coding, identity)

    def test_bodies_below_the_threshold_go_as_they_are(self):
        small = self.get("/text?size=255", "gzip, br")
        self.assertIsNone(small.header("content-encoding"))
        self.assertIsNone(small.header("vary"))
        self.assertEqual(len(small.body), 255)
        at_threshold = self.get("/text?size=256", "gzip")
        self.assertEqual(at_threshold.header("content-encoding"), "gzip")

    def test_head_is_never_compressed(self):
        resp = self.get("/json", "gzip, br", method="HEAD")
        self.assertEqual(resp.status, 200)
        self.assertIsNone(resp.header("content-encoding"))
        self.assertEqual(resp.header("content-length"), str(len(self.json)))

    def test_head_has_the_vary_its_get_has(self):
        for target, vary in (
            ("/json", "Accept-Encoding"),
            ("/text?size=3000", "Accept-Encoding"),
            ("/stream?chunks=2&size=3000&type=text/plain", "Accept-Encoding"),
            ("/text?size=3000&type=image/png", None),
            ("/text?size=255", None),
            ("/text?size=3000&encoding=x-custom", None),
        ):
            for accept in ("gzip, br", "identity", None):
                with self.subTest(target=target, accept=accept):
                    head = self.get(target, accept, method="HEAD")
                    get = self.get(target, accept)
                    self.assertEqual((head.status, head.body), (200, b""))
                    self.assertNotIn(head.header("content-encoding"), ("gzip", "br"))
                    self.assertEqual(head.header("vary"), vary)
                    self.assertEqual(get.header("vary"), vary)
        with H2Conn(self.server.port) as conn:
            resp = conn.fetch("HEAD", "/json", headers=[("accept-encoding", "br")])
            self.assertEqual((resp.status, resp.body, resp.header("content-encoding")), (200, b"", None))
            self.assertEqual(resp.header("vary"), "Accept-Encoding")

    def test_statuses_without_a_whole_body_are_never_compressed(self):
        for status in (204, 206, 304):
            with self.subTest(status=status):
                resp = self.get(f"/text?size=3000&status={status}", "gzip, br")
                self.assertEqual(resp.status, status)
                self.assertIsNone(resp.header("content-encoding"))
        partial = self.get("/text?size=3000&status=206", "gzip, br")
        self.assertEqual(len(partial.body), 3000)

    def test_error_pages_with_bodies_are_compressed(self):
        resp = self.get("/text?size=3000&status=404&type=text/html", "br")
        self.assertEqual(resp.status, 404)
        self.assertEqual(resp.header("content-encoding"), "br")

    def test_a_body_the_handler_encoded_is_left_alone(self):
        resp = self.get("/text?size=3000&encoding=x-custom", "gzip, br")
        self.assertEqual(resp.header_values("content-encoding"), ["x-custom"])
        self.assertIsNone(resp.header("vary"))
        self.assertEqual(len(resp.body), 3000)

    def test_a_strong_etag_becomes_weak_only_when_compressed(self):
        coded = self.get('/text?size=3000&etag="v1"', "gzip")
        self.assertEqual(coded.header("etag"), 'W/"v1"')
        self.assertEqual(coded.header("content-encoding"), "gzip")
        identity = self.get('/text?size=3000&etag="v1"')
        self.assertEqual(identity.header("etag"), '"v1"')
        weak = self.get('/text?size=3000&etag=W/"v2"', "br")
        self.assertEqual(weak.header("etag"), 'W/"v2"')

    def test_no_transform_is_never_compressed(self):
        for cache in ("no-transform", "max-age=60,NO-TRANSFORM"):
            with self.subTest(cache=cache):
                resp = self.get(f"/text?size=3000&cache={cache}", "gzip, br")
                self.assertIsNone(resp.header("content-encoding"))
                self.assertIsNone(resp.header("vary"))
                self.assertEqual((resp.header("content-length"), len(resp.body)), ("3000", 3000))
        resp = self.get("/text?size=3000&cache=no-store", "gzip")
        self.assertEqual(resp.header("content-encoding"), "gzip")

    def test_a_response_or_a_route_can_refuse_compression(self):
        resp = self.get("/text?size=3000&no_compress=1", "gzip, br")
        self.assertIsNone(resp.header("content-encoding"))
        self.assertEqual(len(resp.body), 3000)
        route = self.get("/uncompressed", "gzip, br")
        self.assertIsNone(route.header("content-encoding"))
        self.assertEqual(len(route.body), 4096)

    def test_send_ref_bodies_are_compressed(self):
        identity = self.get("/text?size=5000").body
        for coding in ("gzip", "br"):
            with self.subTest(coding=coding):
                self.assert_coded(self.get("/text?size=5000&ref=1", coding), coding, identity)

    def test_keep_alive_serves_coded_and_plain_responses_in_turn(self):
        with Conn(self.server.port) as conn:
            for accept in ("gzip", None, "br", "gzip", None):
                headers = [("Accept-Encoding", accept)] if accept else []
                conn.request("GET", "/json", headers=headers)
                resp = conn.read_response()
                self.assertEqual(decode(resp.header("content-encoding"), resp.body), self.json)

    def test_streamed_bodies_decode_piece_by_piece(self):
        for coding in ("gzip", "br"):
            with self.subTest(coding=coding), Conn(self.server.port) as conn:
                conn.request("GET", f"/drip?pieces=3&ms={DRIP_MS}", headers=[("Accept-Encoding", coding)])
                head = conn.read_response(head_only=True)
                self.assertEqual(head.header("content-encoding"), coding)
                self.assertEqual(head.header("vary"), "Accept-Encoding")
                decoder = Incremental(coding)
                while b"\n" not in decoder.text:
                    size = int(conn._take_line("chunk size"), 16)
                    self.assertGreater(size, 0, "the body ended before its first line")
                    decoder.feed(conn.read_exactly(size))
                    self.assertEqual(conn.read_exactly(2), b"\r\n")
                first_line_alone(self, decoder.text)
                while True:
                    size = int(conn._take_line("chunk size"), 16)
                    if size == 0:
                        break
                    decoder.feed(conn.read_exactly(size))
                    conn.read_exactly(2)
                self.assertEqual(decoder.text.count(b"\n"), 3)
                self.assertIn(b"piece 3 of 3:", decoder.text)

    def test_a_whole_coded_body_has_its_coded_length(self):
        for size in (256, 4096, 65536):
            identity = self.get(f"/text?size={size}").body
            for coding in ("br", "gzip"):
                with self.subTest(size=size, coding=coding):
                    resp = self.get(f"/text?size={size}", coding)
                    self.assert_coded(resp, coding, identity)
                    self.assertEqual(resp.header("content-length"), str(len(resp.body)))
                    self.assertIsNone(resp.header("transfer-encoding"))
        for size in (0, 1):
            with self.subTest(size=size):
                resp = self.get(f"/text?size={size}", "br, gzip")
                self.assertIsNone(resp.header("content-encoding"))
                self.assertEqual((resp.header("content-length"), len(resp.body)), (str(size), size))
        with H2Conn(self.server.port) as conn:
            for coding in ("br", "gzip"):
                resp = conn.fetch("GET", "/text?size=4096", headers=[("accept-encoding", coding)])
                self.assertEqual(resp.header("content-encoding"), coding)
                self.assertEqual(resp.header("content-length"), str(len(resp.body)))
                self.assertLess(len(resp.body), 4096)

    def test_streamed_bodies_of_every_size_decode_to_themselves(self):
        """Written in one piece of 0 B to 1 MiB, or many (each flushed), coded
        chunked on HTTP/1.1 and in DATA frames on h2c."""
        shapes = [(1, 0), (1, 1), (1, 4096), (1, 65536), (1, 1 << 20), (16, 65536), (3000, 1)]

        def expected(chunks, size):
            return b"".join(bytes([48 + i % 10]) * size for i in range(chunks))

        with Conn(self.server.port, timeout=60) as conn:
            for chunks, size in shapes:
                for coding in ("br", "gzip"):
                    with self.subTest(http="1.1", chunks=chunks, size=size, coding=coding):
                        target = f"/stream?chunks={chunks}&size={size}&type=text/plain"
                        conn.request("GET", target, headers=[("Accept-Encoding", coding)])
                        resp = conn.read_response()
                        self.assertEqual(resp.header("transfer-encoding"), "chunked")
                        self.assertIsNone(resp.header("content-length"))
                        # Each write is flushed: many short ones can come out longer than they went in.
                        self.assertEqual(resp.header("content-encoding"), coding)
                        self.assertEqual(decode(coding, resp.body), expected(chunks, size))
                        self.assertEqual(resp.header("vary"), "Accept-Encoding")
        with H2Conn(self.server.port) as conn:
            for chunks, size in shapes:
                with self.subTest(http="2", chunks=chunks, size=size):
                    target = f"/stream?chunks={chunks}&size={size}&type=text/plain"
                    resp = conn.fetch("GET", target, headers=[("accept-encoding", "br")])
                    self.assertIsNone(resp.header("content-length"))
                    self.assertEqual(resp.header("content-encoding"), "br")
                    self.assertEqual(brotli.decompress(resp.body), expected(chunks, size))

    def test_streamed_bodies_without_accept_encoding_are_plain(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", "/drip?pieces=2&ms=10")
            resp = conn.read_response()
            self.assertIsNone(resp.header("content-encoding"))
            self.assertEqual(resp.header("vary"), "Accept-Encoding")
            self.assertTrue(resp.body.startswith(b"piece 1 of 2:"))

    def test_h2c_compresses_whole_and_streamed_bodies(self):
        with H2Conn(self.server.port) as conn:
            for accept, coding in (("br;q=1, gzip;q=0.8", "br"), ("gzip", "gzip"), (None, None)):
                headers = [("accept-encoding", accept)] if accept else []
                resp = conn.read_response(conn.request("GET", "/json", headers=headers))
                self.assertEqual(resp.header("content-encoding"), coding)
                self.assertEqual(resp.header("vary"), "Accept-Encoding")
                self.assertEqual(decode(coding, resp.body), self.json)
            for coding in ("gzip", "br"):
                stream_id = conn.request("GET", f"/drip?pieces=3&ms={DRIP_MS}", headers=[("accept-encoding", coding)])
                stream = conn.stream(stream_id)
                decoder = Incremental(coding)
                fed = 0
                while b"\n" not in decoder.text:
                    conn.read_frame()
                    self.assertFalse(stream.closed, "the stream ended before its first line")
                    decoder.feed(bytes(stream.body[fed:]))
                    fed = len(stream.body)
                self.assertEqual(stream.response().header("content-encoding"), coding)
                first_line_alone(self, decoder.text)
                conn.read_response(stream_id)
                decoder.feed(bytes(stream.body[fed:]))
                self.assertEqual(decoder.text.count(b"\n"), 3)

    def test_h2c_repeated_heads_follow_each_requests_coding(self):
        # HTTP/2 copies a response head while the next one repeats it: the filter's
        # Content-Encoding, Vary and weakened ETag are lines of the head like the
        # handler's, so a plain answer after a coded one (or gzip after br, or a HEAD,
        # which is never coded, after a GET) gets a head of its own.
        plain = None
        with H2Conn(self.server.port) as conn:
            plan = ["gzip", "gzip", None, None, "br", "br", "gzip", "HEAD gzip", "HEAD gzip", "gzip", None]
            for i, asked in enumerate(plan + plan):
                method, accept = ("HEAD", asked[5:]) if asked and asked.startswith("HEAD") else ("GET", asked)
                headers = [("accept-encoding", accept)] if accept else []
                with self.subTest(request=i, method=method, accept=accept):
                    resp = conn.fetch(method, '/text?size=3000&etag="e1"', headers=headers)
                    coding = accept if method == "GET" else None
                    self.assertEqual(resp.header("content-encoding"), coding)
                    self.assertEqual(resp.header("vary"), "Accept-Encoding")
                    self.assertEqual(resp.header("etag"), 'W/"e1"' if coding else '"e1"')
                    if method == "HEAD":
                        self.assertEqual((resp.body, resp.header("content-length")), (b"", "3000"))
                        continue
                    self.assertEqual(resp.header("content-length"), str(len(resp.body)))
                    body = decode(coding, resp.body)
                    plain = plain or body
                    self.assertEqual((len(body), body), (3000, plain))

    def test_nghttp_sees_the_coding(self):
        result = run_client(["nghttp", "-v", "-H", "accept-encoding: gzip", self.server.url("/json")])
        out = result.stdout.decode("latin-1")
        self.assertEqual(result.returncode, 0, out)
        self.assertIn("content-encoding: gzip", out)
        self.assertIn("vary: Accept-Encoding", out)


class CompressTlsTest(HttpsTestCase):
    server_options = ("--compress", "--workers", "1")

    def test_curl_compressed_over_https_1_1_and_2(self):
        _, identity, _, status = curl_https(self.server, "/json")
        self.assertEqual(status, 200)
        for http in ("1.1", "2"):
            with self.subTest(http=http):
                result, body, version, status = curl_https(
                    self.server, "/json", "--compressed", "-D", "/dev/stderr", http=http
                )
                self.assertEqual((status, version), (200, "2" if http == "2" else "1.1"))
                self.assertIn(b"content-encoding: br", result.stderr.lower())
                self.assertEqual(body, identity)

    def test_streamed_bodies_decode_piece_by_piece_over_https_2(self):
        with h2_over_tls(self.server.port, client_context(alpn=("h2",))) as conn:
            stream_id = conn.request("GET", f"/drip?pieces=3&ms={DRIP_MS}", headers=[("accept-encoding", "gzip")])
            stream = conn.stream(stream_id)
            decoder = Incremental("gzip")
            while b"\n" not in decoder.text:
                conn.read_frame()
                self.assertFalse(stream.closed, "the stream ended before its first line")
                decoder.text = zlib.decompressobj(31).decompress(bytes(stream.body))
            first_line_alone(self, decoder.text)
            resp = conn.read_response(stream_id)
            self.assertEqual(resp.header("content-encoding"), "gzip")
            self.assertEqual(gzip.decompress(resp.body).count(b"\n"), 3)


if __name__ == "__main__":
    unittest.main()
