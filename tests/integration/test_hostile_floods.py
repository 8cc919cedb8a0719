"""Floods on every protocol: pipelined garbage and unread pipelined requests on
HTTP/1.1, HTTP/2 control frames the server answers nothing to, TLS handshakes
that stop after the ClientHello, WebSocket pings from a client that never
reads. Each attacker's memory is bounded, attackers are dropped where they
must be, and other clients are served meanwhile."""

import time
import unittest

from support.h2client import PREFACE, H2Conn, frame, priority_frame, settings_frame, window_update_frame
from support.harness import ServerProcess
from support.hostile import LatencyProbe, close_all, flood, median, open_many
from support.tls_fixtures import HttpsServer, TlsConn, client_context, client_hello, shared_certs
from support.wsclient import OP_PING, frame as ws_frame, handshake_request

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

# RSS is what these tests weigh memory by; ASan's quarantine keeps up to 256 MiB
# of freed blocks resident, which would hide what is really held. A small one
# leaves the sanitizer on and RSS meaningful.
SMALL_QUARANTINE = {"ASAN_OPTIONS": "detect_leaks=1:quarantine_size_mb=4"}
SEND_TIMEOUT = 1.5
SLACK = 5.0
PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


class FloodTestCase(unittest.TestCase):
    def serve(self, *args, server=None):
        server = server or ServerProcess(["--workers", "1", *args], env=SMALL_QUARANTINE)
        server.start()
        self.addCleanup(server.close)
        server.settle_fd_baseline()
        return server

    def attack(self, server, count, payload, read, seconds, prepare=None, probe_port=None, until_closed=True):
        """`count` connections flooding `payload` while a probe measures the
        latency of others; returns (flood results, RSS growth in KiB, latencies)."""
        before, failures = LatencyProbe(probe_port or server.port, 1.0).result()
        self.assertFalse(failures, failures)
        rss = server.rss_kib()
        socks, _ = open_many(server.port, count)
        self.addCleanup(close_all, socks)
        for sock in socks:
            if prepare:
                prepare(sock)
        probe = LatencyProbe(probe_port or server.port, 2.0)
        self.addCleanup(probe.kill)
        results = flood(socks, payload, read=read, seconds=seconds, until_closed=until_closed)
        grown = server.rss_kib() - rss
        during, failures = probe.result()
        self.assertFalse(failures, f"other clients failed during the flood: {failures[:5]}")
        # A loaded machine may serve few in the window; none would mean starved.
        self.assertGreaterEqual(len(during), 2, "other clients were hardly served during the flood")
        self.assertLess(
            median(during),
            20 * median(before) + 0.1,
            f"median latency {median(during):.4f}s during the flood, {median(before):.4f}s before",
        )
        server.assert_running()
        return results, grown


class Http1FloodTest(FloodTestCase):
    def test_pipelined_garbage_gets_answers_then_a_4xx_and_a_close_on_a_hundred_connections(self):
        server = self.serve()
        garbage = PING * 20 + b"\x00\x01 not http at all\r\n" * 20000
        results, grown = self.attack(server, 100, garbage, read=True, seconds=SLACK * 2)
        for i, result in enumerate(results):
            self.assertIsNotNone(result.closed_at, f"connection {i} was not closed")
            self.assertEqual(result.received.count(b"HTTP/1.1 200 OK\r\n"), 20, f"connection {i}")
            # 400 for a bad request line, or 431 when it never ends in a valid head.
            self.assertRegex(
                bytes(result.received),
                rb"pong(HTTP/1\.1 4(00|31) [^\r]*\r\n)",
                f"connection {i} got no 400 or 431 after its good requests",
            )
        self.assertLess(grown, 100 * 64, f"RSS grew by {grown} KiB")
        server.stop_and_check()

    def test_unread_pipelined_requests_for_large_responses_are_bounded_and_dropped(self):
        server = self.serve("--send-timeout", int(SEND_TIMEOUT * 1000))
        # 2,000 requests for 64 KiB each: 128 MiB of answers per connection if nothing pushed back.
        requests = b"GET /echo?size=65536 HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        results, grown = self.attack(server, 20, requests, read=False, seconds=SEND_TIMEOUT + SLACK * 2)
        for i, result in enumerate(results):
            self.assertIsNotNone(result.closed_at, f"connection {i} was not dropped by the send timeout")
            self.assertLess(result.closed_at - result.last_taken, SEND_TIMEOUT + SLACK)
        self.assertLess(grown, 20 * 4096, f"RSS grew by {grown} KiB for 20 non-readers")
        server.stop_and_check()


class Http2ControlFloodTest(FloodTestCase):
    """PING and SETTINGS floods (answered, so bounded by the control queue) are
    test_http2_defences'; these frames get no answer, so nothing may pile up."""

    FLOODS = {
        "PRIORITY": b"".join(priority_frame(2 * i + 1, 0) for i in range(100000)),
        "WINDOW_UPDATE": window_update_frame(0, 1) * 150000,
        "unknown type": frame(0xEE, 0, 0, b"12345678") * 100000,
    }

    def test_floods_of_unanswered_control_frames_are_read_in_bounded_memory_and_the_connection_serves(self):
        server = self.serve()

        def preface(sock):
            sock.sendall(PREFACE + settings_frame({}))

        for name, payload in self.FLOODS.items():
            with self.subTest(frame=name):
                results, grown = self.attack(
                    server, 10, payload, read=True, seconds=SLACK * 2, prepare=preface, until_closed=False
                )
                self.assertEqual([r.sent for r in results], [len(payload)] * 10, "the server stopped reading")
                self.assertLess(grown, 10 * 512, f"RSS grew by {grown} KiB for 10 {name} floods")
                # No opening WINDOW_UPDATE: 150,000 increments of 1 must not overflow our window.
                with H2Conn(server.port, connection_window=65535) as conn:
                    conn.send(payload)
                    self.assertTrue(conn.ping(), f"no PING answer after a {name} flood")
                    resp = conn.fetch("GET", "/ping")
                    self.assertEqual((resp.status, resp.body), (200, b"pong"))
        server.stop_and_check()


class TlsHandshakeFloodTest(FloodTestCase):
    HANDSHAKE_TIMEOUT = 2.0
    COUNT = 1000

    def test_a_thousand_client_hellos_then_silence_are_closed_at_the_handshake_timeout(self):
        server = HttpsServer(
            CERTS.ec,
            ["--workers", "1", "--handshake-timeout", str(int(self.HANDSHAKE_TIMEOUT * 1000)), "--plain-port", "0"],
        )
        server.env = SMALL_QUARANTINE
        self.serve(server=server)
        hello = client_hello()
        started = time.monotonic()
        results, grown = self.attack(
            server,
            self.COUNT,
            hello,
            read=True,
            seconds=self.HANDSHAKE_TIMEOUT + SLACK * 2,
            probe_port=server.plain_port,
        )
        for i, result in enumerate(results):
            self.assertIsNotNone(result.closed_at, f"stalled handshake {i} was never closed")
            self.assertEqual(result.received[:1], b"\x16", f"connection {i} got no ServerHello")
            lived = result.closed_at - started
            self.assertGreaterEqual(lived, self.HANDSHAKE_TIMEOUT * 0.8, f"connection {i} closed early")
        lived = max(r.closed_at for r in results) - started
        self.assertLess(lived, self.HANDSHAKE_TIMEOUT + SLACK * 2)
        with TlsConn(server.port, client_context()) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        self.assertLess(grown, self.COUNT * 64, f"RSS grew by {grown} KiB for {self.COUNT} stalled handshakes")
        server.stop_and_check()


class WebSocketPingFloodTest(FloodTestCase):
    def test_pings_from_clients_that_never_read_are_bounded_and_dropped_at_the_send_timeout(self):
        server = self.serve("--send-timeout", int(SEND_TIMEOUT * 1000))

        def upgrade(sock):
            sock.setblocking(True)
            sock.sendall(handshake_request()[0])
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            self.assertIn(b" 101 ", head.split(b"\r\n")[0])

        pings = ws_frame(OP_PING, b"p" * 125) * 80000  # 10 MiB of pongs owed per client
        results, grown = self.attack(server, 20, pings, read=False, seconds=SEND_TIMEOUT + SLACK * 2, prepare=upgrade)
        for i, result in enumerate(results):
            self.assertIsNotNone(result.closed_at, f"ping flooder {i} was not dropped")
            self.assertLess(result.closed_at - result.last_taken, SEND_TIMEOUT + SLACK)
        self.assertLess(grown, 20 * 1024, f"RSS grew by {grown} KiB for 20 ping flooders")
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
