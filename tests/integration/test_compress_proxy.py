"""The compression filter on responses the reverse proxy passes on from a real
upstream (http_bench_server --compress --upstream), as clients see them over
HTTP/1.1 and h2c: a body the upstream coded itself goes through untouched (never
coded twice, its length and ETag kept), and so does one marked no-transform;
types off the list and bodies whose Content-Length is under the threshold go as
they are, with their length; the rest are coded as Accept-Encoding's q-values
choose (Brotli first), framed by the front (chunked on HTTP/1.1, up to the close
on HTTP/1.0, no Content-Length), a strong ETag made weak, and decode to the
upstream's exact bytes from 0 bytes to 1 MiB, whether the upstream gave a length
or chunks; Vary: Accept-Encoding wherever the answer depended on it; HEAD, 204,
206 and 304 answers get no body and no coding."""

import base64
import gzip
import random
import socketserver
import unittest
import urllib.parse

import brotli

from support.h2client import H2Conn
from support.harness import Conn, ServerProcess, ServerTestCase, run_client
from support.upstream import LoopbackServer, read_head

MIB = 1 << 20
MIN_SIZE = 256  # xHttpCompressOptions.min_size's default

# Text that compresses to about three quarters (base64 of random bytes, in lines):
# a coded megabyte still crosses the filter's 16 KiB output pieces many times.
_rng = random.Random(20261129)
TEXT = base64.encodebytes(_rng.randbytes(MIB))[:MIB]


def decode(coding, body):
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "br":
        return brotli.decompress(body)
    if coding is None:
        return body
    raise AssertionError(f"unexpected Content-Encoding {coding!r}")


class Upstream(LoopbackServer):
    def __init__(self):
        super().__init__(Handler)


class Handler(socketserver.StreamRequestHandler):
    """GET|HEAD /upstream/body?size=N answers N bytes of TEXT as text/plain with a
    Content-Length, and as the query says: type=T (a Content-Type of T; "none": no
    Content-Type), framing=chunked (in pieces of 7000 bytes), coded=gzip|br (the body
    coded by the upstream, with Content-Encoding), etag=V, vary=V, cache=V (a
    Cache-Control), status=S (204 and
    304 without a body, 206 the first 100 bytes with a Content-Range)."""

    def handle(self):
        try:
            while True:
                method, target, _ = read_head(self.rfile)
                if method is None:
                    return
                self.answer(method, target)
        except (ConnectionError, OSError, ValueError):
            return

    def answer(self, method, target):
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))
        size, status = int(query.get("size", "0")), int(query.get("status", "200"))
        body = TEXT[:size]
        head = [f"HTTP/1.1 {status} X"]
        if query.get("type", "text/plain") != "none":
            head.append(f"Content-Type: {query.get('type', 'text/plain')}")
        coded = query.get("coded")
        if coded:
            body = gzip.compress(body) if coded == "gzip" else brotli.compress(body)
            head.append(f"Content-Encoding: {coded}")
        for field, name in (("etag", "ETag"), ("vary", "Vary"), ("cache", "Cache-Control")):
            if field in query:
                head.append(f"{name}: {query[field]}")
        chunked = query.get("framing") == "chunked"
        if status in (204, 304):
            body, chunked = b"", False
        elif status == 206:
            body = body[:100]
            head.append(f"Content-Range: bytes 0-99/{size}")
            head.append("Content-Length: 100")
        elif chunked:
            head.append("Transfer-Encoding: chunked")
        else:
            head.append(f"Content-Length: {len(body)}")
        out = ("\r\n".join(head) + "\r\n\r\n").encode()
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif chunked:
            pieces = [body[i : i + 7000] for i in range(0, len(body), 7000)]
            body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        self.wfile.write(out + body)
        self.wfile.flush()


def target(**query):
    return "/upstream/body?" + urllib.parse.urlencode(query)


class CompressProxyTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        cls.upstream = Upstream()
        try:
            args = ["--compress", "--workers", "1", "--upstream", f"http://127.0.0.1:{cls.upstream.port}"]
            return ServerProcess([*args, "--upstream-timeout", "20000"]).start()
        except BaseException:
            cls.upstream.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.upstream.stop()

    def get(self, path, accept=None, method="GET", headers=()):
        headers = list(headers)
        if accept is not None:
            headers.append(("Accept-Encoding", accept))
        return self.fetch(method, path, headers=headers)

    def assert_as_sent(self, resp, body, length=True):
        """resp is the upstream's answer as it was: no coding of ours, no Vary, its length."""
        self.assertEqual(resp.status, 200)
        self.assertIsNone(resp.header("content-encoding"))
        self.assertIsNone(resp.header("vary"))
        self.assertEqual(resp.body, body)
        if length:
            self.assertEqual(resp.header("content-length"), str(len(body)))

    def assert_coded(self, resp, coding, body):
        """resp coded in coding by the front: framed by the front, decoding to body."""
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header_values("content-encoding"), [coding] if coding else [])
        self.assertEqual(resp.header("vary"), "Accept-Encoding")
        self.assertEqual(decode(coding, resp.body), body)
        if coding:
            self.assertIsNone(resp.header("content-length"))
            self.assertEqual(resp.header("transfer-encoding"), "chunked")

    def test_a_body_the_upstream_coded_passes_untouched(self):
        for coded in ("gzip", "br"):
            for framing in ("length", "chunked"):
                sent = gzip.compress(TEXT[:5000]) if coded == "gzip" else brotli.compress(TEXT[:5000])
                for accept in ("gzip, br", "br", "gzip", None):
                    with self.subTest(coded=coded, framing=framing, accept=accept):
                        resp = self.get(target(size=5000, coded=coded, framing=framing, etag='"c1"'), accept)
                        self.assertEqual(resp.status, 200)
                        self.assertEqual(resp.header_values("content-encoding"), [coded])
                        self.assertIsNone(resp.header("vary"))
                        self.assertEqual(resp.header("etag"), '"c1"')
                        self.assertEqual(resp.body, sent)  # the upstream's bytes, not coded again
                        self.assertEqual(decode(coded, resp.body), TEXT[:5000])
                        if framing == "length":
                            self.assertEqual(resp.header("content-length"), str(len(sent)))

    def test_no_transform_is_left_alone(self):
        """RFC 9111 §5.2.2.6: an intermediary must not transform a no-transform answer."""
        for cache in ("no-transform", "public, No-Transform, max-age=60"):
            for framing in ("length", "chunked"):
                with self.subTest(cache=cache, framing=framing):
                    resp = self.get(target(size=5000, cache=cache, framing=framing, etag='"n1"'), "br, gzip")
                    self.assert_as_sent(resp, TEXT[:5000], length=framing == "length")
                    self.assertEqual((resp.header("cache-control"), resp.header("etag")), (cache, '"n1"'))
        resp = self.get(target(size=5000, cache="no-cache"), "br")
        self.assertEqual(brotli.decompress(resp.body), TEXT[:5000])

    def test_types_off_the_list_go_as_they_are(self):
        for media_type in ("image/png", "application/octet-stream", "video/mp4", "none"):
            with self.subTest(media_type=media_type):
                self.assert_as_sent(self.get(target(size=5000, type=media_type), "gzip, br"), TEXT[:5000])
                chunked = self.get(target(size=5000, type=media_type, framing="chunked"), "gzip, br")
                self.assert_as_sent(chunked, TEXT[:5000], length=False)

    def test_a_length_under_the_threshold_goes_as_it_is_at_it_is_coded(self):
        for size in (0, 1, MIN_SIZE - 1):
            with self.subTest(size=size):
                self.assert_as_sent(self.get(target(size=size), "br, gzip"), TEXT[:size])
        for size in (MIN_SIZE, MIN_SIZE + 1):
            for coding in ("br", "gzip"):
                with self.subTest(size=size, coding=coding):
                    self.assert_coded(self.get(target(size=size), coding), coding, TEXT[:size])

    def test_accept_encoding_chooses_and_vary_says_so(self):
        cases = [
            (None, None),
            ("identity", None),
            ("gzip;q=0", None),
            ("br;q=0, gzip", "gzip"),
            ("br;q=0.5, gzip", "gzip"),
            ("gzip, br", "br"),
            ("br;q=0.9, gzip;q=0.9", "br"),
            ("*", "br"),
            ("*;q=0.5, br;q=0", "gzip"),
            ("gzip;q=0, *;q=0", None),
            ("deflate, zstd", None),
        ]
        for accept, coding in cases:
            with self.subTest(accept=accept):
                self.assert_coded(self.get(target(size=4096), accept), coding, TEXT[:4096])
        # The upstream's own Vary stays, and Accept-Encoding is named once.
        resp = self.get(target(size=4096, vary="Origin"), "gzip")
        self.assertEqual(resp.header_values("vary"), ["Origin", "Accept-Encoding"])
        for vary in ("Accept-Encoding", "origin, accept-encoding", "*"):
            with self.subTest(vary=vary):
                resp = self.get(target(size=4096, vary=vary), "gzip")
                self.assertEqual(resp.header_values("vary"), [vary])
                self.assertEqual(gzip.decompress(resp.body), TEXT[:4096])

    def test_bodies_of_every_size_decode_to_the_upstream_s_bytes_over_http1(self):
        with Conn(self.server.port, timeout=60) as conn:
            for size in (0, 1, 4096, 65536, MIB):
                for framing in ("length", "chunked"):
                    for coding in ("br", "gzip"):
                        with self.subTest(size=size, framing=framing, coding=coding):
                            conn.request(
                                "GET", target(size=size, framing=framing), headers=[("Accept-Encoding", coding)]
                            )
                            resp = conn.read_response()
                            expected = coding if size >= MIN_SIZE or (framing == "chunked" and size) else None
                            self.assertEqual(resp.header("content-encoding"), expected)
                            self.assertEqual(decode(expected, resp.body), TEXT[:size])
                            if expected and size >= MIB:
                                self.assertLess(len(resp.body), size * 4 // 5)

    def test_bodies_of_every_size_decode_over_h2c(self):
        with H2Conn(self.server.port) as conn:
            for size in (0, 1, 4096, 65536, MIB):
                for framing in ("length", "chunked"):
                    with self.subTest(size=size, framing=framing):
                        resp = conn.fetch(
                            "GET", target(size=size, framing=framing), headers=[("accept-encoding", "br")]
                        )
                        coding = resp.header("content-encoding")
                        # A body of unknown length is coded, however short it turns out.
                        self.assertEqual(coding, "br" if size >= MIN_SIZE or (framing == "chunked" and size) else None)
                        self.assertEqual(decode(coding, resp.body), TEXT[:size])
                        if coding:
                            self.assertIsNone(resp.header("content-length"))
                            self.assertEqual(resp.header("vary"), "Accept-Encoding")
                        elif framing == "length":
                            self.assertEqual(resp.header("content-length"), str(size))

    def test_curl_compressed_decodes_a_megabyte(self):
        for flag in ("--http1.1", "--http2-prior-knowledge"):
            with self.subTest(flag=flag):
                result = run_client(
                    ["curl", "-sS", "--compressed", flag, "-D", "/dev/stderr", self.server.url(target(size=MIB))]
                )
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(b"content-encoding: br", result.stderr.lower())
                self.assertEqual(result.stdout, TEXT[:MIB])

    def test_an_http_1_0_client_gets_the_coded_body_up_to_the_close(self):
        """No chunks for HTTP/1.0: the coded body, of a length not known ahead, ends
        where the connection does."""
        for coding in ("br", "gzip"):
            with self.subTest(coding=coding), Conn(self.server.port, timeout=30) as conn:
                conn.send(
                    b"GET %s HTTP/1.0\r\nAccept-Encoding: %s\r\n\r\n" % (target(size=65536).encode(), coding.encode())
                )
                head, _, body = conn.read_until_eof().partition(b"\r\n\r\n")
                fields = {
                    k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:])
                }
                self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
                self.assertEqual(fields.get(b"content-encoding"), coding.encode())
                self.assertNotIn(b"content-length", fields)
                self.assertNotIn(b"transfer-encoding", fields)
                self.assertEqual(decode(coding, body), TEXT[:65536])

    def test_a_strong_etag_is_made_weak_only_when_coded(self):
        coded = self.get(target(size=4096, etag='"v1"'), "gzip")
        self.assertEqual((coded.header("content-encoding"), coded.header("etag")), ("gzip", 'W/"v1"'))
        plain = self.get(target(size=4096, etag='"v1"'), None)
        self.assertEqual((plain.header("content-encoding"), plain.header("etag")), (None, '"v1"'))
        self.assertEqual(plain.header("content-length"), "4096")
        weak = self.get(target(size=4096, etag='W/"v2"'), "br")
        self.assertEqual((weak.header("content-encoding"), weak.header("etag")), ("br", 'W/"v2"'))
        small = self.get(target(size=100, etag='"v3"'), "br")
        self.assertEqual((small.header("content-encoding"), small.header("etag")), (None, '"v3"'))

    def test_head_gets_no_body_and_no_coding(self):
        resp = self.get(target(size=4096, etag='"h1"'), "gzip, br", method="HEAD")
        self.assertEqual((resp.status, resp.body), (200, b""))
        self.assertIsNone(resp.header("content-encoding"))
        self.assertEqual(resp.header("content-length"), "4096")
        self.assertEqual(resp.header("etag"), '"h1"')
        self.assertEqual(resp.header("vary"), "Accept-Encoding")  # as the GET's
        self.assertIsNone(self.get(target(size=100), "br", method="HEAD").header("vary"))
        # The connection goes on: the HEAD's answer had no body after all.
        with Conn(self.server.port) as conn:
            conn.request("HEAD", target(size=4096), headers=[("Accept-Encoding", "br")])
            self.assertEqual(conn.read_response(head_only=True).body, b"")
            conn.request("GET", target(size=4096), headers=[("Accept-Encoding", "br")])
            self.assertEqual(brotli.decompress(conn.read_response().body), TEXT[:4096])
        with H2Conn(self.server.port) as conn:
            resp = conn.fetch("HEAD", target(size=4096), headers=[("accept-encoding", "br")])
            self.assertEqual((resp.status, resp.body, resp.header("content-encoding")), (200, b"", None))

    def test_204_304_and_206_are_never_coded(self):
        for status in (204, 304):
            with self.subTest(status=status):
                resp = self.get(target(size=4096, status=status, etag='"s1"'), "gzip, br")
                self.assertEqual((resp.status, resp.body), (status, b""))
                self.assertIsNone(resp.header("content-encoding"))
                self.assertEqual(resp.header("etag"), '"s1"')
        resp = self.get(target(size=4096, status=206, etag='"s2"'), "gzip, br")
        self.assertEqual((resp.status, resp.body), (206, TEXT[:100]))
        self.assertIsNone(resp.header("content-encoding"))
        self.assertEqual(resp.header("content-range"), "bytes 0-99/4096")
        self.assertEqual((resp.header("content-length"), resp.header("etag")), ("100", '"s2"'))


if __name__ == "__main__":
    unittest.main()
