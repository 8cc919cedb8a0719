"""What a TLS port does with clients that do not speak TLS properly: plaintext
HTTP gets a plain 400, garbage gets an alert or a close, a client that stalls
mid-handshake is closed after --handshake-timeout, one with nothing in common
gets handshake_failure. After each the server serves others and holds no more
descriptors than before."""

import os
import select
import ssl
import time
import unittest

from support.harness import Conn, run_client
from support.tls_fixtures import HttpsTestCase, ManualTls, client_hello, s_client, shared_certs

CERTS = None
ALERT_RECORD = 0x15
HANDSHAKE_TIMEOUT_MS = 500
# Closing must wait for the timeout (less a margin for timer granularity) and
# come soon after it, even under sanitizers on a busy machine.
EARLIEST_CLOSE = 0.4
LATEST_CLOSE = 5.0


setUpModule, tearDownModule = shared_certs(__name__)


def tls_record(content_type, body, version=b"\x03\x01"):
    return bytes([content_type]) + version + len(body).to_bytes(2, "big") + body


class FdCheckedTestCase(HttpsTestCase):
    """Every test must leave the server serving with its baseline descriptor count."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.baseline_fds = cls.server.settle_fd_baseline()

    def setUp(self):
        super().setUp()
        # Registered first, so it runs after the test's own cleanups closed its connections.
        self.addCleanup(self.check_serving_with_baseline_fds)

    def check_serving_with_baseline_fds(self):
        self.server.assert_running()
        self.assert_serves_ping()
        count = self.server.wait_fd_count(self.baseline_fds)
        self.assertEqual(count, self.baseline_fds, "server holds more fds than before this test")

    def raw(self, timeout=10):
        conn = Conn(self.server.port, timeout=timeout)
        self.addCleanup(conn.close)
        return conn

    def assert_alert_or_close(self, conn, within):
        """The server answers with nothing but an alert record, then closes."""
        started = time.monotonic()
        data = conn.read_until_eof(within)
        self.assertLess(time.monotonic() - started, within)
        if data:
            self.assertEqual(data[0], ALERT_RECORD, f"server sent {data[:40]!r}, not an alert")
            self.assertEqual(data[1], 3, f"not a TLS record: {data[:40]!r}")


class GarbageTest(FdCheckedTestCase):
    """The default 10 s handshake timeout: any close well before it is the server's answer
    to what it got, not the timer."""

    server_options = ["--workers", "1"]
    ANSWER_WITHIN = 4.0

    def assert_plain_400(self, request):
        conn = self.raw()
        conn.send(request)
        resp = conn.read_response()
        self.assertEqual((resp.version, resp.status), ("HTTP/1.1", 400), resp)
        self.assertIn("close", resp.tokens("connection"))
        self.assertEqual(conn.read_until_eof(self.ANSWER_WITHIN), b"")

    def test_plaintext_http_gets_a_plain_400_then_close(self):
        for request in (
            b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
            b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n",
            b"PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        ):
            with self.subTest(request=request[:20]):
                self.assert_plain_400(request)

    def test_plaintext_with_any_other_method_gets_a_plain_400_too(self):
        for request in (
            b"DELETE /ping HTTP/1.1\r\nHost: x\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
            b"PATCH /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            b"CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ):
            with self.subTest(request=request[:20]):
                self.assert_plain_400(request)

    def test_plaintext_http_with_curl_is_told_plainly(self):
        result = run_client(
            [
                "curl",
                "-sS",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                f"http://127.0.0.1:{self.server.port}/ping",
            ],
            timeout=30,
        )
        self.assertEqual(result.stdout, b"400", result.stderr)

    def test_random_bytes_get_an_alert_or_a_close(self):
        for first in (0x00, 0x80, 0x17, 0xFF):
            with self.subTest(first_byte=first):
                conn = self.raw()
                conn.send(bytes([first]) + os.urandom(1023))
                self.assert_alert_or_close(conn, self.ANSWER_WITHIN)

    def test_malformed_handshake_records_get_an_alert_or_a_close(self):
        hello = client_hello()
        cases = {
            "garbage handshake body": tls_record(0x16, os.urandom(64)),
            "oversized record": b"\x16\x03\x01\xff\xff" + os.urandom(2000),
            "hello shorter than its record": hello[:6] + (len(hello) - 9 - 50).to_bytes(3, "big") + hello[9:],
            "application data before the handshake": tls_record(0x17, os.urandom(100), b"\x03\x03"),
            "alert before the handshake": tls_record(0x15, b"\x02\x28", b"\x03\x03"),
        }
        for name, data in cases.items():
            with self.subTest(case=name):
                conn = self.raw()
                try:
                    conn.send(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.assert_alert_or_close(conn, self.ANSWER_WITHIN)

    def test_garbage_after_a_complete_handshake_closes_that_connection(self):
        with ManualTls(self.server.port) as tls:
            tls.handshake()
            tls.send(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
            response = b""
            while b"pong" not in response:
                tls.read_raw()
                try:
                    response += tls.tls.read(65536)
                except ssl.SSLWantReadError:
                    pass
            # A record that cannot decrypt (bad_record_mac), in the middle of a keep-alive connection.
            tls.send_raw(tls_record(0x17, os.urandom(64), b"\x03\x03"))
            tls.read_until_eof(self.ANSWER_WITHIN)

    def test_no_common_cipher_gets_handshake_failure(self):
        for args in (["-tls1_3", "-ciphersuites", "TLS_AES_128_CCM_SHA256"], ["-tls1_2", "-cipher", "AES128-SHA256"]):
            with self.subTest(args=args):
                result = s_client(self.server.port, *args)
                self.assertFalse(result.handshake_done, result.text)
                self.assertIn(40, result.alert_numbers, result.text)

    def test_clients_that_vanish_mid_handshake_are_released(self):
        hello = client_hello()
        for cut in (1, 5, len(hello) // 2, len(hello)):
            conn = self.raw()
            conn.send(hello[:cut])
            if cut % 2:
                conn.abort()  # an RST, like a client that crashed
            else:
                conn.close()
        with ManualTls(self.server.port) as tls:
            tls.send_client_hello()
            tls.read_raw()  # the server's flight, then we leave


class StalledHandshakeTest(FdCheckedTestCase):
    server_options = ["--workers", "1", "--handshake-timeout", str(HANDSHAKE_TIMEOUT_MS)]

    def assert_closed_by_the_timeout(self, read_until_eof, started):
        read_until_eof(LATEST_CLOSE + 2)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, EARLIEST_CLOSE, "closed before the handshake timeout")
        self.assertLess(elapsed, LATEST_CLOSE, "not closed soon after the handshake timeout")

    def test_a_silent_client_is_closed_after_the_handshake_timeout(self):
        conn = self.raw()
        self.assert_closed_by_the_timeout(conn.read_until_eof, time.monotonic())

    def test_a_partial_client_hello_is_closed_after_the_handshake_timeout(self):
        conn = self.raw()
        started = time.monotonic()
        conn.send(client_hello()[:40])
        self.assert_closed_by_the_timeout(conn.read_until_eof, started)

    def test_a_client_that_never_finishes_is_closed_after_the_handshake_timeout(self):
        with ManualTls(self.server.port) as tls:
            started = time.monotonic()
            tls.send_client_hello()
            self.assertEqual(tls.read_raw()[:1], b"\x16")  # the server's flight came
            self.assert_closed_by_the_timeout(tls.read_until_eof, started)

    def test_a_zero_length_record_then_silence_is_closed_after_the_handshake_timeout(self):
        conn = self.raw()
        started = time.monotonic()
        conn.send(tls_record(0x16, b""))
        self.assert_closed_by_the_timeout(conn.read_until_eof, started)

    def test_the_timeout_bounds_a_trickled_handshake_in_total(self):
        # One byte every 50 ms would take ~15 s for a whole ClientHello.
        conn = self.raw()
        hello = client_hello()
        started = time.monotonic()
        closed = False
        for pos in range(len(hello)):
            try:
                conn.send(hello[pos : pos + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if conn.sock in select.select([conn.sock], [], [], 0.05)[0]:
                closed = True
                break
            if time.monotonic() - started > LATEST_CLOSE:
                break
        self.assertTrue(closed, f"still open {time.monotonic() - started:.1f}s into a trickled handshake")
        self.assertGreaterEqual(time.monotonic() - started, EARLIEST_CLOSE)

    def test_a_finished_handshake_is_not_held_to_the_timeout(self):
        conn = self.connect()
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")
        time.sleep(HANDSHAKE_TIMEOUT_MS / 1000 * 3)
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_many_stalled_handshakes_do_not_delay_others_and_are_all_closed(self):
        stalled = [self.raw() for _ in range(50)]
        for conn in stalled[::2]:
            conn.send(client_hello()[:30])
        started = time.monotonic()
        self.assert_serves_ping()
        self.assertLess(time.monotonic() - started, 2.0)
        for conn in stalled:
            conn.read_until_eof(LATEST_CLOSE + 2)
        self.assertLess(time.monotonic() - started, LATEST_CLOSE + 2)


if __name__ == "__main__":
    unittest.main()
