"""Lingering close: a connection the server closes while its client still sends
(a 413 refused from the head, the body still arriving) sends its answer and a
FIN, then reads and drops the rest for a bounded time, so the kernel does not
answer the unread bytes with a reset that destroys the answer. Over plain TCP
and TLS (xKit's records and OpenSSL's), on the backend XK_IO picks (ctest runs
this file on both); bounded by time, by time without input and by bytes; no
descriptor left behind."""

import signal
import ssl
import time
import unittest

from support.harness import Conn, ServerProcess, start_owned
from support.tls_fixtures import HttpsServer, ManualTls, TlsConn, client_context, current_certs, shared_certs

setUpModule, tearDownModule = shared_certs(__name__)

MAX_BODY = 1000
# Announced, and far more than is ever sent: the head alone draws the 413.
ANNOUNCED = 64 << 20
HEAD = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {ANNOUNCED}\r\n\r\n".encode()
PIECE = b"b" * 16384
# The shared servers' byte cap (--lingering-max), under the default (64 MiB) to keep the test short.
CAP = 4 << 20
# What the refused client sends after its head: well under the byte cap, and more
# than the server's socket buffers hold, so a server that closed without reading it would
# have unread input, and the kernel would reset the connection.
SENT_AFTER_REFUSAL = 768 << 10


def send_for_a_while(conn, total, pause=0.0):
    """Sends total bytes of body in pieces; raises what the socket raises."""
    for _ in range(total // len(PIECE)):
        conn.sock.sendall(PIECE)
        if pause:
            time.sleep(pause)


def sends_until_cut_off(conn, pause, limit_s):
    """Sends pieces until the server ends the connection; the seconds that took and the bytes sent."""
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < limit_s:
        try:
            conn.sock.sendall(PIECE)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError, ssl.SSLEOFError):
            return time.monotonic() - start, sent
        sent += len(PIECE)
        if pause:
            time.sleep(pause)
    raise AssertionError(f"still accepted after {limit_s} s of sending")


class LingeringCloseCases:
    """The cases, over the connections open_conn makes to self.server."""

    def refused_then_read(self, conn):
        conn.send(HEAD)
        send_for_a_while(conn, SENT_AFTER_REFUSAL)
        resp = conn.read_response()
        rest = conn.read_until_eof()
        return resp, rest

    def test_a_client_that_keeps_sending_after_a_413_reads_the_whole_413(self):
        for attempt in range(4):
            with self.subTest(attempt=attempt):
                conn = self.connect()
                resp, rest = self.refused_then_read(conn)
                self.assertEqual(resp.status, 413, resp)
                self.assertIn("close", resp.tokens("connection"))
                self.assertEqual(len(resp.body), int(resp.header("content-length")))
                self.assertEqual(rest, b"")
                self.assertFalse(conn.reset, "the 413 was followed by a reset, not the end")

    def test_a_client_that_never_stops_sending_is_cut_off_at_the_byte_cap(self):
        conn = self.connect()
        conn.send(HEAD)
        # As fast as the socket takes it: the cap is reached long before the 5 s limit.
        took, sent = sends_until_cut_off(conn, pause=0, limit_s=4)
        self.assertLess(took, 4)
        self.assertGreaterEqual(sent, CAP)

    def test_no_descriptor_is_left_behind(self):
        baseline = self.server.settle_fd_baseline()
        for _ in range(6):
            conn = self.connect()
            self.refused_then_read(conn)
            conn.close()
        # A client that stops sending but never closes: the linger's timeout without input.
        idle = self.connect()
        idle.send(HEAD + PIECE)
        self.assertEqual(idle.read_response().status, 413)
        self.assertEqual(self.server.wait_fd_count(baseline, timeout=6), baseline)
        self.server.assert_running()


class PlainTest(LingeringCloseCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = ["--workers", "1", "--max-body", str(MAX_BODY), "--lingering-max", str(CAP)]
        cls.server = ServerProcess(args).start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop_and_check()
        finally:
            cls.server.close()

    def connect(self):
        conn = Conn(self.server.port)
        self.addCleanup(conn.close)
        return conn


class TlsTest(PlainTest):
    options = ()

    @classmethod
    def setUpClass(cls):
        args = ["--workers", "1", "--no-ktls", "--no-h3", "--max-body", str(MAX_BODY), "--lingering-max", str(CAP)]
        args += cls.options
        cls.server = HttpsServer(current_certs().ec, args).start()

    def connect(self):
        conn = TlsConn(self.server.port, client_context())
        self.addCleanup(conn.close)
        return conn

    def test_a_bad_record_followed_by_more_input_gets_its_alert_and_the_end_not_a_reset(self):
        # The session ends at the bad record, with the alert; what the client sends on is read
        # and dropped beneath the records until it stops, so the alert and the FIN reach it.
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            with self.subTest(version=version):
                client = ManualTls(self.server.port, client_context(version=version))
                self.addCleanup(client.close)
                client.handshake()
                client.tls.write(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                raw = bytearray(client.outgoing.read())
                raw[-3] ^= 0x40  # inside the tag
                client.send_raw(bytes(raw))
                # Sent on after the server has failed the session: without the linger, the
                # server's socket is closed by now, and these meet a reset.
                send_for_a_while(client, 32 * len(PIECE), pause=0.01)
                client.sock.settimeout(10)
                while client.read_raw():
                    pass  # ConnectionResetError here is the failure
                with self.assertRaises(ssl.SSLError) as caught:
                    client.tls.read(4096)
                self.assertIn("BAD_RECORD_MAC", caught.exception.reason or str(caught.exception))


class OpensslRecordsTest(TlsTest):
    options = ("--openssl-records",)


class BoundsTest(unittest.TestCase):
    """The linger's limits, set short (--lingering-time, --lingering-timeout)."""

    def start(self, *options):
        server = start_owned(self, ServerProcess(["--workers", "1", "--max-body", str(MAX_BODY), *options]))
        self.addCleanup(server.stop_and_check)  # before close: a clean exit, sanitizers quiet
        return server

    def test_a_slow_sender_is_cut_off_at_the_lingering_time(self):
        server = self.start("--lingering-time", "1500", "--lingering-timeout", "1000")
        conn = Conn(server.port)
        self.addCleanup(conn.close)
        conn.send(HEAD)
        # A piece every 0.1 s: never a second without input, nowhere near the byte cap.
        took, _ = sends_until_cut_off(conn, pause=0.1, limit_s=6)
        self.assertGreater(took, 1.2)
        self.assertLess(took, 4.5)

    def test_a_client_that_goes_quiet_is_closed_after_the_lingering_timeout(self):
        server = self.start("--lingering-time", "20000", "--lingering-timeout", "500")
        baseline = server.settle_fd_baseline()
        conn = Conn(server.port)
        self.addCleanup(conn.close)
        conn.send(HEAD + PIECE)
        self.assertEqual(conn.read_response().status, 413)
        start = time.monotonic()
        self.assertEqual(server.wait_fd_count(baseline, timeout=5), baseline)
        self.assertLess(time.monotonic() - start, 4)

    def test_a_lingering_connection_does_not_hold_a_graceful_stop_past_the_lingering_time(self):
        server = self.start("--lingering-time", "1000", "--lingering-timeout", "1000", "--shutdown-timeout", "30000")
        conn = Conn(server.port)
        self.addCleanup(conn.close)
        conn.send(HEAD)
        send_for_a_while(conn, 64 << 10)
        self.assertEqual(conn.read_response().status, 413)
        start = time.monotonic()
        # The client keeps sending through the stop: the linger, not the stop's deadline, ends it.
        server.send_signal(signal.SIGTERM)
        self.assertLess(sends_until_cut_off(conn, pause=0.1, limit_s=6)[0], 3)
        server.assert_clean_exit(server.wait_exit(10))
        self.assertLess(time.monotonic() - start, 6)


if __name__ == "__main__":
    unittest.main()
