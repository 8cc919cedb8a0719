"""An HTTP/3 front through the reverse proxy: https_bench_server with
--upstream serves h3 on its UDP port, and aioquic (support/h3client.py)
calls paths it does not route, passed to an HTTP/1.1 upstream (an xKit
server with its test routes).

Checked as the client sees it: a GET answered by the upstream (it saw
HTTP/1.1); a POST of
300 KB whose body reached the upstream whole (its length and CRC-32); an
answer streamed in pieces with its trailer passed on as an HTTP/3 trailer
section; a 404 of the upstream passed as it is; several requests at once on
one QUIC connection each with its own answer."""

import asyncio
import json
import os
import unittest
import zlib

from support.h3client import h3_connect, run
from support.harness import start_server
from support.tls_fixtures import HttpsServer, shared_certs, start_owned

setUpModule, tearDownModule = shared_certs(__name__)
CERTS = None


class Http3FrontThroughTheProxyTest(unittest.TestCase):
    def setUp(self):
        self.upstream = start_server(self, ["--workers", "1"])
        options = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        front = HttpsServer(CERTS.rsa, options + ["--upstream-timeout", "10000"])
        front.argv.remove("--test-routes")  # so /whoami, /upload and /stream are the upstream's
        self.front = start_owned(self, front)

    def exchange(self, *requests):
        """Each (method, path, body) on one HTTP/3 connection at once; their responses."""

        async def go():
            async with h3_connect("127.0.0.1", self.front.port, ca_file=CERTS.ca) as h3:
                return await asyncio.gather(*(h3.request(m, p, body=b) for m, p, b in requests))

        return run(go())

    def test_get_and_post_to_an_http1_upstream(self):
        body = os.urandom(300_000)
        got, posted = self.exchange(("GET", "/whoami?q=h3", b""), ("POST", "/upload", body))
        self.assertEqual(got.status, 200, got.body)
        info = json.loads(got.body)
        self.assertEqual((info["q"], info["protocol"]), ("h3", "HTTP/1.1"))
        self.assertEqual(posted.status, 200, posted.body)
        sent = json.loads(posted.body)
        self.assertEqual((sent["bytes"], sent["crc32"]), (len(body), f"{zlib.crc32(body):08x}"))
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_a_streamed_answer_with_its_trailer_and_an_upstream_404(self):
        streamed, missing = self.exchange(
            ("GET", "/stream?chunks=20&size=10000&trailer=via-h3", b""), ("GET", "/no/such/path", b"")
        )
        self.assertEqual((streamed.status, len(streamed.body)), (200, 200_000))
        self.assertEqual(streamed.trailers.get("x-stream-trailer"), "via-h3")
        self.assertEqual(missing.status, 404)
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_many_requests_on_one_connection(self):
        answers = self.exchange(*(("GET", f"/whoami?q=r{i}", b"") for i in range(20)))
        self.assertEqual([json.loads(a.body)["q"] for a in answers], [f"r{i}" for i in range(20)])
        self.front.stop_and_check()
        self.upstream.stop_and_check()


if __name__ == "__main__":
    unittest.main()
