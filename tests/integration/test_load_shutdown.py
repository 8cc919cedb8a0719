"""Load from wrk, and graceful stop on SIGTERM/SIGINT: in-flight requests
answered, idle connections closed, exit 0 within --shutdown-timeout."""

import signal
import subprocess
import time
import unittest

from support.h2client import H2Conn
from support.harness import Conn, ServerTestCase, http_request, run_client, start_server
from support.loadgen import wrk_report


class WrkLoadTest(ServerTestCase):
    server_args = ["--workers", "2"]

    def run_wrk(self, target, seconds):
        """The run's requests, once it is checked clean: exit 0, no socket error, no status >= 400."""
        report, text = wrk_report(
            run_client(["wrk", "-t1", "-c50", f"-d{seconds}s", self.server.url(target)], timeout=seconds + 30)
        )
        self.assertEqual(report.problems, [], text)
        return report.requests, text

    def test_wrk_ping_smoke_run_has_no_errors_and_no_non_2xx(self):
        baseline = self.server.settle_fd_baseline()
        requests, text = self.run_wrk("/ping", 2)
        self.assertGreater(requests, 1000, text)
        # wrk closed its 50 connections; the server must release them all.
        self.assertEqual(self.server.wait_fd_count(baseline), baseline)

    def test_wrk_echo_run_has_no_errors_and_no_non_2xx(self):
        requests, text = self.run_wrk("/echo?size=4096", 1)
        self.assertGreater(requests, 100, text)


class ShutdownTest(unittest.TestCase):
    """Each test owns a server, since each ends it."""

    def idle_connections(self, server, served, silent):
        """`served` keep-alive connections after one request each, plus
        `silent` that never sent a byte."""
        conns = []
        for _ in range(served):
            conn = Conn(server.port)
            self.addCleanup(conn.close)
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
            conns.append(conn)
        for _ in range(silent):
            conn = Conn(server.port)
            self.addCleanup(conn.close)
            conns.append(conn)
        return conns

    def test_sigterm_under_load_answers_every_inflight_delay_and_exits_zero(self):
        server = start_server(self, ["--workers", "2", "--shutdown-timeout", "5000"])
        delayed = []
        for _ in range(6):
            conn = Conn(server.port)
            self.addCleanup(conn.close)
            conn.request("GET", "/delay?ms=1000")
            delayed.append(conn)
        sent = time.monotonic()
        wrk = subprocess.Popen(
            ["wrk", "-t1", "-c20", "-d5s", server.url("/ping")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.addCleanup(wrk.wait, 10)
        self.addCleanup(wrk.kill)
        time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        for i, conn in enumerate(delayed):
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, b"done"), f"delayed request {i}: {resp!r}")
            self.assertIn("close", resp.tokens("connection"))
            self.assertEqual(conn.read_until_eof(), b"")
        self.assertGreaterEqual(time.monotonic() - sent, 0.9, "the delays were cut short")
        server.assert_clean_exit(server.wait_exit(5.0 + 5.0))

    def test_sigterm_lets_a_slow_reader_finish_its_response(self):
        server = start_server(self, ["--workers", "1", "--shutdown-timeout", "5000"])
        # A small receive buffer keeps most of the 16 MiB queued in the server.
        conn = Conn(server.port, rcvbuf=64 * 1024)
        self.addCleanup(conn.close)
        conn.request("GET", "/echo?size=16777216")
        time.sleep(0.2)  # the response is now blocked on the full socket
        server.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        resp = conn.read_response()
        self.assertEqual(resp.status, 200)
        self.assertEqual(len(resp.body), 16777216)
        self.assertEqual(resp.body.count(b"x"), 16777216)
        self.assertEqual(conn.read_until_eof(3), b"")
        server.assert_clean_exit(server.wait_exit(5))

    def test_sigterm_lets_a_request_whose_body_is_arriving_finish(self):
        server = start_server(self, ["--workers", "1", "--shutdown-timeout", "5000"])
        conn = Conn(server.port)
        self.addCleanup(conn.close)
        conn.send(http_request("POST", "/echo", headers=[("Content-Length", "1000")]) + b"a" * 500)
        time.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        conn.send(b"b" * 500)
        resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"a" * 500 + b"b" * 500))
        self.assertIn("close", resp.tokens("connection"))
        server.assert_clean_exit(server.wait_exit(5))

    def test_no_new_connection_is_served_after_sigterm(self):
        server = start_server(self, ["--workers", "2", "--shutdown-timeout", "5000"])
        pending = Conn(server.port)
        self.addCleanup(pending.close)
        pending.request("GET", "/delay?ms=1000")  # keeps the server draining
        time.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        try:
            late = Conn(server.port)
        except ConnectionRefusedError:
            pass  # listener already closed: the expected case
        else:
            with late:
                try:
                    late.request("GET", "/ping")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.assertEqual(late.read_until_eof(3), b"", "a connection made after SIGTERM was served")
        self.assertEqual(pending.read_response().body, b"done")
        server.assert_clean_exit(server.wait_exit(10))

    def test_sigterm_closes_idle_keepalive_connections_promptly(self):
        # The idle timeout (60 s) and the shutdown deadline (10 s) are far
        # off: only a graceful stop that closes idle connections ends fast.
        server = start_server(self, ["--workers", "2", "--shutdown-timeout", "10000"])
        conns = self.idle_connections(server, served=5, silent=3)
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        for conn in conns:
            self.assertEqual(conn.read_until_eof(3), b"")
        server.assert_clean_exit(server.wait_exit(3))
        self.assertLess(time.monotonic() - stopped, 3)

    def test_sigint_stops_gracefully_too(self):
        server = start_server(self, ["--workers", "1", "--shutdown-timeout", "10000"])
        conns = self.idle_connections(server, served=2, silent=1)
        pending = Conn(server.port)
        self.addCleanup(pending.close)
        pending.request("GET", "/delay?ms=300")
        time.sleep(0.05)
        server.send_signal(signal.SIGINT)
        resp = pending.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"done"))
        for conn in conns:
            self.assertEqual(conn.read_until_eof(3), b"")
        server.assert_clean_exit(server.wait_exit(3))

    def test_shutdown_timeout_ends_requests_that_take_too_long(self):
        server = start_server(self, ["--workers", "1", "--shutdown-timeout", "500"])
        stuck = Conn(server.port)
        self.addCleanup(stuck.close)
        stuck.request("GET", "/delay?ms=20000")
        time.sleep(0.1)
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        returncode = server.wait_exit(0.5 + 3)
        elapsed = time.monotonic() - stopped
        server.assert_clean_exit(returncode)
        self.assertGreaterEqual(elapsed, 0.4, "exited before the in-flight request's deadline")
        rest = stuck.read_until_eof(2)
        self.assertNotIn(b"done", rest)

    def test_sigterm_while_a_handler_holds_the_request_of_a_closed_http2_connection_exits_clean(self):
        # The handler learns only when its hold ends that the client left (no abort callback):
        # until then the closed connection stays, and the stop must not drain it again (a GOAWAY
        # queued on a closed connection was leaked, and its timer armed on memory soon freed).
        server = start_server(self, ["--workers", "1"])
        h2 = H2Conn(server.port, server.connect_host)
        h2.request("POST", "/upload?hold_ms=800&no_abort_callback=1", body=b"x" * 100)
        time.sleep(0.2)
        h2.abort()
        time.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        server.assert_clean_exit(server.wait_exit(5))
        self.assertIn("abandoned by its client", server.stderr_text())

    def test_sigterm_with_no_connections_exits_zero_at_once(self):
        server = start_server(self, ["--workers", "2"])
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.assert_clean_exit(server.wait_exit(3))
        self.assertLess(time.monotonic() - stopped, 3)


if __name__ == "__main__":
    unittest.main()
