"""The upstream client's keep-alive (xHttpUpstreamConf.keepalive_ms, the bench
server's --upstream-keepalive): a pooled connection is closed once it has been
idle that long, counted from when its last request ended, however many
requests it carried before. Seen from a Python upstream of the test's own,
which notes when each of the proxy's connections opened and closed."""

import socketserver
import time
import unittest

from support.harness import Conn, start_server
from support.upstream import LoopbackServer

KEEPALIVE_MS = 1500


class TimedUpstream(LoopbackServer):
    """Answers every GET with 200 "ok" and keeps, per accepted connection,
    [requests answered, when it closed (None while open)]."""

    def __init__(self):
        self.conns = []
        super().__init__(TimedHandler)

    def snapshot(self):
        with self.lock:
            return [list(c) for c in self.conns]


class TimedHandler(socketserver.StreamRequestHandler):
    def handle(self):
        record = [0, None]
        with self.server.lock:
            self.server.conns.append(record)
        try:
            while True:
                line = self.rfile.readline()
                if not line:
                    break
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                self.wfile.flush()
                with self.server.lock:
                    record[0] += 1
        except OSError:
            pass
        with self.server.lock:
            record[1] = time.monotonic()


class UpstreamKeepAliveTest(unittest.TestCase):
    def setUp(self):
        self.upstream = TimedUpstream()
        self.addCleanup(self.upstream.stop)
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        self.server = start_server(self, [*args, "--upstream-keepalive", str(KEEPALIVE_MS)])

    def get(self):
        with Conn(self.server.port) as conn:
            conn.request("GET", "/proxied")
            resp = conn.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"ok"))
        return time.monotonic()

    def wait_closed(self, limit_s):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            conns = self.upstream.snapshot()
            if conns and all(closed is not None for _, closed in conns):
                return conns
            time.sleep(0.02)
        self.fail(f"the idle upstream connection was not closed within {limit_s} s: {self.upstream.snapshot()}")

    def test_an_idle_connection_closes_after_the_keepalive(self):
        last = self.get()
        conns = self.wait_closed(KEEPALIVE_MS / 1000 + 5)
        self.assertEqual(len(conns), 1)
        idle = conns[0][1] - last
        self.assertGreaterEqual(idle, KEEPALIVE_MS / 1000 - 0.1, "closed before it had been idle the keep-alive")

    def test_the_keepalive_counts_from_the_last_request(self):
        """Requests reuse the connection past the first spell's keep-alive: it
        closes a keep-alive after the last, not after the first."""
        first = self.get()
        last = first
        while last - first < 2 * KEEPALIVE_MS / 1000:
            time.sleep(KEEPALIVE_MS / 1000 / 3)
            last = self.get()
        conns = self.upstream.snapshot()
        self.assertEqual(len(conns), 1, "every request went on the one pooled connection")
        self.assertIsNone(conns[0][1], "closed while in use")
        conns = self.wait_closed(KEEPALIVE_MS / 1000 + 5)
        self.assertEqual(len(conns), 1)
        self.assertGreaterEqual(conns[0][0], 4)
        idle = conns[0][1] - last
        self.assertGreaterEqual(idle, KEEPALIVE_MS / 1000 - 0.1, "closed before it had been idle the keep-alive")


if __name__ == "__main__":
    unittest.main()
