"""HTTP/2 interop with clients other than curl, nghttp and h2load (test_http2.py
has those): Go's net/http client (support/h2goclient, built here) over h2c and
over TLS with ALPN h2; Python's h2 package for a scripted exchange (streams up to
the server's limit, request and response trailers, a body larger than every
window); and browser-shaped header sets (many cookie fields, a long user-agent,
50 fields, repeated so that the client's HPACK dynamic table carries them)."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest
import zlib

import h2.config
import h2.connection
import h2.events

from support.h2client import H2ServerTestCase
from support.tls_fixtures import shared_certs, start_https

setUpModule, tearDownModule = shared_certs(__name__)

GO_CLIENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "h2goclient")


def build_go_client(test):
    """support/h2goclient built into a temporary folder; its path."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise AssertionError("Go is needed for the Go HTTP/2 client (scripts/install-deps.sh)")
    out = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, out, True)
    path = os.path.join(out, "h2goclient")
    done = subprocess.run([go, "build", "-o", path, "."], cwd=GO_CLIENT_DIR, capture_output=True, timeout=300)
    test.assertEqual(done.returncode, 0, done.stderr.decode())
    return path


def run_go_client(test, *args):
    done = subprocess.run([build_go_client(test), *args], capture_output=True, timeout=120)
    test.assertEqual(done.returncode, 0, done.stderr.decode())
    return json.loads(done.stdout)


class GoClientTest(H2ServerTestCase):
    server_args = ("--workers", "1")

    def assert_go_report(self, report):
        """What support/h2goclient's script must see from the server."""
        self.assertEqual(report["errors"], [])
        self.assertEqual(list(report["protos"]), ["HTTP/2.0"])
        self.assertEqual((report["pings"], report["ping_bodies_ok"]), (200, 200))
        # Go assumes 100 streams until the server's SETTINGS arrive: a burst of 200 may take two.
        self.assertIn(report["connections"], (1, 2))
        self.assertEqual(report["echo_length"], 300000)
        self.assertEqual(report["upload"], report["upload_crc"])
        self.assertEqual((report["trailer"], report["stream_body"]), ("from-go", 3000))
        self.assertEqual(report["cookie"], "value-37")

    def test_go_client_over_h2c_by_prior_knowledge(self):
        self.assert_go_report(run_go_client(self, "-base", f"http://{self.server.connect_host}:{self.server.port}"))

    def test_go_client_over_tls_with_alpn_h2(self):
        server = start_https(self, CERTS.rsa, "--workers", "1")  # noqa: F821 (set by setUpModule)
        self.assert_go_report(run_go_client(self, "-base", f"https://localhost:{server.port}", "-ca", CERTS.ca))  # noqa: F821
        server.stop_and_check()


class H2Package:
    """A client connection driven by Python's h2 package: its own framing, HPACK
    (with a dynamic table) and flow control, independent of support/h2client."""

    def __init__(self, test, host, port):
        self.test = test
        self.sock = socket.create_connection((host, port), timeout=10)
        test.addCleanup(self.sock.close)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.responses, self.bodies, self.trailers, self.ended = {}, {}, {}, set()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self):
        """Reads once and handles what came, returning the window the server gives us."""
        data = self.sock.recv(65536)
        self.test.assertTrue(data, "the server closed the connection")
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self.responses[event.stream_id] = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                self.trailers[event.stream_id] = dict(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                self.test.fail(f"the server ended the exchange: {event}")
        self.flush()

    def request(self, path, method="GET", extra=(), end_stream=True):
        stream_id = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "localhost"), *extra]
        self.conn.send_headers(stream_id, headers, end_stream=end_stream)
        self.flush()
        return stream_id

    def send_body(self, stream_id, body):
        """Sends body as the stream's and the connection's windows allow."""
        while body:
            window = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            if window == 0:
                self.pump()
                continue
            self.conn.send_data(stream_id, body[:window])
            body = body[window:]
            self.flush()

    def wait(self, stream_ids):
        while not set(stream_ids) <= self.ended:
            self.pump()


def browser_headers(request_number):
    """What a browser sends for a page's sub-resource: 50 fields in all, among them a long
    user-agent and 30 cookies, each in its own field as browsers split them (RFC 9113 §8.2.3)."""
    fields = [
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/126.0.0.0 Safari/537.36 " + "x" * 300,
        ),
        ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
        ("accept-encoding", "gzip, deflate, br, zstd"),
        ("accept-language", "en-GB,en;q=0.9,fr;q=0.8"),
        ("referer", f"http://localhost/page/{request_number}"),
        ("sec-fetch-dest", "document"),
        ("sec-fetch-mode", "navigate"),
        ("sec-fetch-site", "same-origin"),
        ("sec-ch-ua", '"Chromium";v="126", "Not.A/Brand";v="24"'),
        ("sec-ch-ua-mobile", "?0"),
        ("sec-ch-ua-platform", '"Linux"'),
        ("upgrade-insecure-requests", "1"),
        ("cache-control", "max-age=0"),
    ]
    fields += [("cookie", f"c{i}=v{i}-{'y' * (i * 7 % 60)}") for i in range(30)]
    fields += [(f"x-custom-{i}", f"value {i} of request {request_number}") for i in range(50 - 4 - len(fields))]
    return fields


class H2PackageTest(H2ServerTestCase):
    server_args = ("--workers", "1")

    def client(self):
        return H2Package(self, self.server.connect_host, self.server.port)

    def test_streams_up_to_the_servers_limit_at_once(self):
        client = self.client()
        client.pump()  # the server's SETTINGS
        limit = client.conn.remote_settings.max_concurrent_streams
        self.assertGreater(limit, 1)
        ids = [client.request(f"/echo?size={i * 100}") for i in range(limit)]
        client.wait(ids)
        for i, stream_id in enumerate(ids):
            self.assertEqual(client.responses[stream_id][":status"], "200")
            self.assertEqual(client.bodies.get(stream_id, b""), b"x" * (i * 100))

    def test_request_body_beyond_every_window_with_request_trailers(self):
        client = self.client()
        body = os.urandom(3 << 20)  # past the default stream (64 KiB) and connection windows
        stream_id = client.request("/upload", "POST", end_stream=False)
        client.send_body(stream_id, body)
        client.conn.send_headers(stream_id, [("x-checksum", f"{zlib.crc32(body):08x}")], end_stream=True)
        client.flush()
        client.wait([stream_id])
        self.assertEqual(client.responses[stream_id][":status"], "200")
        answer = json.loads(client.bodies[stream_id])
        self.assertEqual((answer["bytes"], answer["crc32"]), (len(body), f"{zlib.crc32(body):08x}"))

    def test_response_trailers_after_a_body_beyond_our_window(self):
        client = self.client()
        stream_id = client.request("/stream?chunks=40&size=4096&trailer=from-h2")
        client.wait([stream_id])
        self.assertEqual(len(client.bodies[stream_id]), 40 * 4096)
        self.assertEqual(client.trailers[stream_id], {"x-stream-trailer": "from-h2"})

    def test_browser_shaped_header_sets_repeated_on_one_connection(self):
        client = self.client()
        for round_number in range(20):
            fields = browser_headers(round_number)
            self.assertEqual(len(fields) + 4, 50)
            wanted = f"c{round_number + 5}"
            stream_id = client.request(f"/whoami?cookie={wanted}", extra=fields)
            client.wait([stream_id])
            self.assertEqual(client.responses[stream_id][":status"], "200")
            answer = json.loads(client.bodies[stream_id])
            self.assertEqual(answer["cookie"], dict(f[1].split("=", 1) for f in fields if f[0] == "cookie")[wanted])
        # The client indexed the fields it repeats: later blocks are mostly table references.
        self.assertGreater(len(client.conn.encoder.header_table.dynamic_entries), 10)


if __name__ == "__main__":
    unittest.main()
