"""Trailer fields after a streamed body: a chunked trailer section on
HTTP/1.1, a trailing HEADERS frame on HTTP/2, nothing for HTTP/1.0."""

import unittest

from support.harness import Conn, ServerTestCase, http_request, run_client


class TrailersTest(ServerTestCase):
    TARGET = "/stream?chunks=3&size=5&trailer=sum-42"

    def test_http11_trailer_follows_the_last_chunk(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", self.TARGET)
            resp = conn.read_response()
            self.assertEqual(resp.body, b"000001111122222")
            self.assertEqual(resp.trailers, [b"X-Stream-Trailer: sum-42"])
            # The connection stays usable after a trailer section.
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")

    def test_http10_client_gets_the_body_without_trailers(self):
        with Conn(self.server.port) as conn:
            conn.send(http_request("GET", self.TARGET, version="HTTP/1.0"))
            raw = conn.read_until_eof()
        head, body = raw.split(b"\r\n\r\n", 1)
        self.assertEqual(body, b"000001111122222")
        self.assertNotIn(b"X-Stream-Trailer", raw)

    def test_http2_trailer_arrives_as_a_final_headers_frame(self):
        result = run_client(["nghttp", "-v", self.server.url(self.TARGET)])
        out = result.stdout.decode()
        self.assertEqual(result.returncode, 0, out)
        self.assertIn("x-stream-trailer: sum-42", out)
        # The trailers, not a DATA frame, end the stream.
        self.assertIn("END_STREAM | END_HEADERS", out[out.index("x-stream-trailer: sum-42") :])
        self.assertNotRegex(out, r"recv DATA frame <length=\d+, flags=0x01")


if __name__ == "__main__":
    unittest.main()
