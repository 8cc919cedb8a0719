"""Lingering close (xConnLinger: lingering_time_ms, lingering_timeout_ms,
lingering_max_bytes) against clients that push its bounds, on the backend XK_IO
picks (ctest runs this file on both): one that sends past the lingering time,
one that sends past the byte cap, one that resets or closes mid-linger, 500
lingering at once (each bound ends them; the server answers others meanwhile),
and an HTTP/2 handler that answers on a connection already lingering after a
GOAWAY: its answer is dropped, not sent into the shut socket, whose failure cut
the linger short and met the client's next bytes with a reset. After each: the
server answers a normal request, its descriptors are back where they were, and
its stderr has no sanitizer report."""

import socket
import time
import unittest

from support.h2client import GOAWAY, H2Conn, frame
from support.harness import Conn, raise_fd_limit, start_server

MAX_BODY = 1000
# Announced, and far more than is ever sent: the head alone draws the 413.
HEAD = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {64 << 20}\r\n\r\n".encode()
PIECE = b"b" * 16384
CAP = 256 << 10  # the byte cap the cap's test sets (--lingering-max)
PING_TYPE = 6


def sends_until_cut_off(conn, pause, limit_s):
    """Sends pieces until the server ends the connection; the seconds that took and the bytes sent."""
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < limit_s:
        try:
            conn.sock.sendall(PIECE)
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start, sent
        sent += len(PIECE)
        if pause:
            time.sleep(pause)
    raise AssertionError(f"still accepted after {limit_s} s of sending")


def refused(server):
    """A connection whose 413 was read: the server lingers on it."""
    conn = Conn(server.port, timeout=10)
    conn.send(HEAD + PIECE)
    resp = conn.read_response()
    if resp.status != 413:
        raise AssertionError(f"got {resp!r}, not the 413")
    return conn


class LingeringAbuseTest(unittest.TestCase):
    def start(self, *options):
        server = start_server(self, ["--workers", "1", "--max-body", str(MAX_BODY), *options])
        return server, server.settle_fd_baseline()

    def assert_back(self, server, baseline, timeout=5):
        """Every lingering connection is gone within timeout seconds; the server
        answers a normal request; no sanitizer report so far."""
        self.assertEqual(server.wait_fd_count(baseline, timeout=timeout), baseline)
        with Conn(server.port) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().status, 200)
        server.assert_running()
        self.assertEqual(server.sanitizer_reports(), [], server.stderr_tail())

    def test_a_client_sending_past_the_lingering_time_is_cut_off_there(self):
        server, baseline = self.start("--lingering-time", "1000", "--lingering-timeout", "500")
        conn = refused(server)
        # A piece every 50 ms: never half a second without input, far from the byte cap.
        took, _ = sends_until_cut_off(conn, pause=0.05, limit_s=6)
        conn.close()
        self.assertGreater(took, 0.7)
        self.assertLess(took, 4)
        self.assert_back(server, baseline)
        server.stop_and_check()

    def test_a_client_sending_past_the_byte_cap_is_cut_off_after_it(self):
        server, baseline = self.start("--lingering-max", str(CAP), "--lingering-time", "20000")
        conn = refused(server)
        took, sent = sends_until_cut_off(conn, pause=0, limit_s=6)
        conn.close()
        self.assertGreaterEqual(sent, CAP)
        self.assertLess(took, 4)  # the cap, not the 20 s
        self.assert_back(server, baseline)
        server.stop_and_check()

    def test_a_client_that_resets_or_closes_mid_linger_is_let_go_at_once(self):
        # Long bounds: only the client's reset or end explains a prompt close.
        server, baseline = self.start("--lingering-time", "20000", "--lingering-timeout", "10000")
        for leave in ("abort", "close", "shutdown"):
            conn = refused(server)
            conn.send(PIECE * 4)
            self.assertEqual(server.fd_count(), baseline + 1, leave)
            if leave == "shutdown":
                conn.sock.shutdown(socket.SHUT_WR)  # a FIN, the socket kept
            else:
                getattr(conn, leave)()
            self.assertEqual(server.wait_fd_count(baseline, timeout=2), baseline, leave)
            conn.close()
        self.assert_back(server, baseline)
        server.stop_and_check()

    def test_five_hundred_lingering_at_once_all_end(self):
        count = 500
        raise_fd_limit(4 * count)
        server, baseline = self.start("--lingering-time", "20000", "--lingering-timeout", "1500")
        conns = []
        try:
            for _ in range(count):
                conn = Conn(server.port, timeout=10)
                conns.append(conn)
                conn.send(HEAD + PIECE)
            for conn in conns:
                self.assertEqual(conn.read_response().status, 413)
            # All linger now; the server answers another meanwhile.
            self.assertEqual(server.fd_count(), baseline + count)
            with Conn(server.port) as other:
                other.request("GET", "/ping")
                self.assertEqual(other.read_response().status, 200)
            # A third reset, a third close; the rest go quiet: the timeout without input ends them.
            for i, conn in enumerate(conns):
                if i % 3 == 0:
                    conn.abort()
                elif i % 3 == 1:
                    conn.close()
            self.assert_back(server, baseline, timeout=6)
            # The quiet ones heard the end: a FIN, not a reset.
            for conn in conns[2::3]:
                self.assertEqual(conn.read_until_eof(), b"")
                self.assertFalse(conn.reset)
        finally:
            for conn in conns:
                conn.close()
        server.stop_and_check()

    def test_an_http2_answer_on_a_lingering_connection_is_dropped(self):
        """A stream's handler answers after the connection failed (GOAWAY, then
        the linger): nothing may be sent after the GOAWAY and the FIN, and the
        linger goes on to its bounds, reading what the client still sends."""
        server, baseline = self.start("--lingering-time", "3000", "--lingering-timeout", "2000")
        conn = H2Conn(server.port, timeout=10)
        conn.request("GET", "/delay?ms=300")
        conn.send(frame(PING_TYPE, 0, 0, b"1234567"))  # a PING of 7 bytes: FRAME_SIZE_ERROR
        # The client sends on past the handler's answer: a linger cut short resets it.
        started = time.monotonic()
        while time.monotonic() - started < 1.2:
            try:
                conn.sock.sendall(b"x" * 1024)
            except (ConnectionResetError, BrokenPipeError) as e:
                self.fail(f"the server closed after {time.monotonic() - started:.2f} s, mid-linger: {e!r}")
            time.sleep(0.05)
        conn.sock.shutdown(socket.SHUT_WR)
        conn.read_until_closed()
        self.assertFalse(conn.reset, "the end was a reset")
        types = [t for t, _, _, _ in conn.frames_seen]
        self.assertIn(GOAWAY, types)
        self.assertEqual(types[-1], GOAWAY, f"frames after the GOAWAY: {conn.frames_seen}")
        conn.close()
        self.assert_back(server, baseline)
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
