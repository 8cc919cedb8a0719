"""libcurl's multi-socket API on xKit's loop (tests/interop/interop_curl.c,
through curl_on_xkit.h): twenty downloads of up to 400 kB and an 8 MB upload
at once against a real HTTP server (Python's http.server, in this process,
on a free loopback port), every body checked byte for byte by the program.
The upload needs the loop to report a socket writable again and again: curl
writes a little per call. Runs on the backend XK_IO names, as every test."""

import http.server
import os
import threading
import unittest
import urllib.parse

from support.interop import program_path, run_program

UPLOAD_BYTES = 8 * 1024 * 1024


def pattern(i, n):
    """What interop_curl.c expects of download i: byte j is (31 i + j) mod 251."""
    one_cycle = bytes((i * 31 + j) % 251 for j in range(251))
    return (one_cycle * (n // 251 + 1))[:n]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_body(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path != "/blob":
            self.send_error(404)
            return
        self.send_body(pattern(int(query["i"][0]), int(query["n"][0])))

    def do_POST(self):
        if self.path != "/echo":
            self.send_error(404)
            return
        length = int(self.headers["Content-Length"])
        body = bytearray()
        while len(body) < length:
            piece = self.rfile.read(min(65536, length - len(body)))
            if not piece:
                break
            body += piece
        self.send_body(bytes(body))


class CurlMultiSocketTest(unittest.TestCase):
    def setUp(self):
        self.program = program_path("interop_curl", "libcurl (libcurl4-openssl-dev)")
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def test_twenty_downloads_and_a_large_upload_at_once_arrive_whole(self):
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        output = run_program(self, [self.program, base, "20", str(UPLOAD_BYTES)], dict(os.environ))
        self.assertIn("ok: 20 downloads and a 8388608-byte upload", output)
        want = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"
        self.assertIn(f"on {want}", output)


if __name__ == "__main__":
    unittest.main()
