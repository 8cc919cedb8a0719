"""Restarting behind a load balancer without dropping anything, on the real bench
server: the health route that turns 503 when a stop begins while the grace period
keeps serving; a second copy on the same port (--shared-port) taking over the first's
queued connections; listening sockets inherited (--listen-fd) and passed by systemd's
socket activation (a launcher that binds, sets LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES and
execs the server); the client named by X-Forwarded-For from trusted proxies only; and
HAProxy in front of two copies with send-proxy-v2 and health checks, under wrk, each
copy restarted in turn and one in place: not one request fails."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from support.h2client import H2Conn
from support.haproxy import free_port, start_haproxy
from support.harness import Conn, ServerProcess, bench_server_path, start_owned, start_server
from support.loadgen import start_wrk, stop_wrk

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "launcher.py")
GRACE_MS = 1500
QUEUED_CLIENTS = 64


def get(port, target, host="127.0.0.1", headers=None, source=None):
    """One request on a fresh connection (from source's address where given): the response."""
    if source is None:
        with Conn(port, host) as conn:
            conn.request("GET", target, headers=headers)
            return conn.read_response()
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect((host, port))
    lines = [f"GET {target} HTTP/1.1", "Host: x", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or [])]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def whoami(port, headers=None, source="127.0.0.1"):
    return get(port, "/whoami", headers=headers, source=source)


class HealthRouteTest(unittest.TestCase):
    def test_health_turns_503_at_sigterm_while_the_grace_keeps_serving(self):
        server = start_server(
            self,
            ["--workers", "2", "--health", "/healthz", "--stop-grace", str(GRACE_MS), "--shutdown-timeout", "3000"],
        )
        resp = get(server.port, "/healthz")
        self.assertEqual((resp.status, resp.body), (200, b"ok\n"))
        kept = server.open_conn()
        self.addCleanup(kept.close)
        kept.request("GET", "/ping")
        self.assertIsNone(kept.read_response().header("Connection"))
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        resp = get(server.port, "/healthz")
        self.assertEqual((resp.status, resp.body), (503, b"stopping\n"))
        # Still accepting and serving everything else, each response closing its connection.
        for _ in range(5):
            resp = get(server.port, "/ping")
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
        kept.request("GET", "/ping")
        resp = kept.read_response()
        self.assertEqual((resp.status, resp.header("Connection")), (200, "close"))
        self.assertLess(time.monotonic() - stopped, GRACE_MS / 1000 - 0.3, "the checks took too long to mean anything")
        server.assert_clean_exit(server.wait_exit(10))
        self.assertGreaterEqual(time.monotonic() - stopped, GRACE_MS / 1000)
        with self.assertRaises(ConnectionRefusedError):
            get(server.port, "/ping")

    def test_with_a_grace_an_idle_connection_is_left_for_its_client_to_use_or_close(self):
        # A load balancer's idle connection, closed by us while the balancer sends a request on
        # it, loses that request (HAProxy then closes its client's connection unanswered). With
        # a grace, the drain leaves idle connections alone: the next request on one is answered,
        # with Connection: close, and the server exits once its client has closed the other.
        server = start_server(self, ["--workers", "1", "--stop-grace", "200", "--shutdown-timeout", "5000"])
        used, left = server.open_conn(), server.open_conn()
        self.addCleanup(used.close)
        self.addCleanup(left.close)
        for conn in (used, left):
            conn.request("GET", "/ping")
            self.assertIsNone(conn.read_response().header("Connection"))
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        time.sleep(0.6)  # past the grace: the listeners are closed, the drain has begun
        with self.assertRaises(ConnectionRefusedError):
            get(server.port, "/ping")
        used.request("GET", "/ping")
        resp = used.read_response()
        self.assertEqual((resp.status, resp.body, resp.header("Connection")), (200, b"pong", "close"))
        self.assertIsNone(server.proc.poll(), "the server left before its idle connection's client closed it")
        left.close()
        server.assert_clean_exit(server.wait_exit(10))
        self.assertLess(time.monotonic() - stopped, 4.0, "the server waited for its deadline, not for the close")

    def test_without_a_grace_the_stop_is_as_before(self):
        server = start_server(self, ["--workers", "1", "--health", "/healthz"])
        self.assertEqual(get(server.port, "/healthz").status, 200)
        stopped = time.monotonic()
        server.stop_and_check()
        self.assertLess(time.monotonic() - stopped, 1.0)


class SharedPortTest(unittest.TestCase):
    def test_a_second_copy_on_a_port_in_use_needs_shared_port(self):
        first = start_server(self, ["--workers", "1"])
        done = subprocess.run(
            [bench_server_path(), str(first.port), "--workers", "1"], capture_output=True, text=True, timeout=30
        )
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("already in use", done.stderr)
        first.stop_and_check()

    def test_connections_queued_on_a_stopping_copy_are_all_answered(self):
        """The old copy is frozen (SIGSTOP) while clients connect and send a request each, so
        the kernel queues them on its sockets. Then the new copy starts, and once its workers
        run, its reuseport program gives it every new connection: requests made while the old
        copy is still frozen are answered (without the program about half would wait for the
        frozen copy). Then SIGTERM and SIGCONT: each queued one is answered, by the old copy,
        which takes what is queued before it closes its sockets, or by the new one, to which
        the kernel hands what arrives between that last accept and the close (that window is
        too short to hit on purpose here: unit.test_listener_handover measures it)."""
        port = free_port()
        args = ["--workers", "2", "--shared-port", "--shutdown-timeout", "5000"]
        old = start_owned(self, ServerProcess(args, port=port))
        old.send_signal(signal.SIGSTOP)
        conns = []
        try:
            for _ in range(QUEUED_CLIENTS):
                conn = Conn(port)
                self.addCleanup(conn.close)
                conn.request("GET", "/ping")
                conns.append(conn)
            new = start_owned(self, ServerProcess(args, port=port))
            deadline = time.monotonic() + 10
            while "new connections come to this copy" not in new.stderr_text() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertIn("new connections come to this copy", new.stderr_text())
            for _ in range(16):
                self.assertEqual(get(port, "/ping").status, 200)
            old.send_signal(signal.SIGTERM)
        finally:
            old.send_signal(signal.SIGCONT)
        answered = 0
        for conn in conns:
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            answered += 1
        self.assertEqual(answered, QUEUED_CLIENTS)
        old.assert_clean_exit(old.wait_exit(10))
        self.assertEqual(get(port, "/ping").status, 200)  # the new copy serves on
        new.stop_and_check()
        self.assertIn("hands its queued connections over", old.stderr_text() + new.stderr_text())

    def test_in_place_restarts_under_load_reset_no_connection(self):
        """wrk with "Connection: close" (a new connection for each request) while the copy on
        the port is replaced five times, the new one first: without the hand-over, the
        connections and half-done handshakes the kernel had for the old copy's sockets when
        they closed are reset (about three a restart here), and wrk counts socket errors."""
        port = free_port()
        args = ["--workers", "2", "--shared-port", "--shutdown-timeout", "5000"]
        copy = start_owned(self, ServerProcess(args, port=port))
        wrk = start_wrk(self, ["-t1", "-c32", "-d60s", "-H", "Connection: close", f"http://127.0.0.1:{port}/ping"])
        time.sleep(0.3)
        for _ in range(5):
            new = start_owned(self, ServerProcess(args, port=port))
            time.sleep(0.1)
            copy.stop_and_check()
            copy = new
        time.sleep(0.3)
        report, text = stop_wrk(wrk)
        self.assertEqual(report.problems, [], text)
        self.assertGreater(report.requests, 1000, text)
        copy.stop_and_check()


class InheritedSocketsTest(unittest.TestCase):
    def launch(self, launcher_args, server_args=(), port=0):
        argv = [sys.executable, LAUNCHER, *launcher_args, "--", bench_server_path(), str(port), "--test-routes"]
        return start_owned(self, ServerProcess(argv=[*argv, "--workers", "2", *server_args]))

    def test_systemd_sockets_are_listened_on(self):
        ports = [free_port(), free_port()]
        server = self.launch(
            ["--listen", f"127.0.0.1:{ports[0]}", "--listen", f"127.0.0.1:{ports[1]}", "--names", "web:admin"]
        )
        self.assertEqual(server.port, ports[0])
        for port in ports:
            resp = get(port, "/ping")
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            self.assertEqual(whoami(port)["local_port"], port)
        server.stop_and_check()

    def test_a_bound_socket_that_does_not_listen_yet_is_made_to(self):
        port = free_port()
        server = self.launch(["--listen", f"127.0.0.1:{port}", "--bound-only"])
        self.assertEqual(get(port, "/ping").status, 200)
        server.stop_and_check()

    def test_sockets_for_another_process_are_left_alone(self):
        port = free_port()
        server = self.launch(["--listen", f"127.0.0.1:{port}", "--pid-of-another"])
        self.assertNotEqual(server.port, port)  # its own port, 0 asked for
        self.assertEqual(get(server.port, "/ping").status, 200)
        server.stop_and_check()

    def test_listen_fd_and_a_socket_that_outlives_each_copy(self):
        """The test holds the socket; a request made while no copy runs waits in its
        queue and is answered by the next copy."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.addCleanup(sock.close)
        port = sock.getsockname()[1]
        args = ["--workers", "2", "--listen-fd", str(sock.fileno())]
        first = start_owned(self, ServerProcess(args, pass_fds=[sock.fileno()]))
        self.assertEqual(first.port, port)
        self.assertEqual(get(port, "/ping").status, 200)
        first.stop_and_check()
        waiting = Conn(port)  # queued by the kernel: no copy is running
        self.addCleanup(waiting.close)
        waiting.request("GET", "/ping")
        second = start_owned(self, ServerProcess(args, pass_fds=[sock.fileno()]))
        resp = waiting.read_response()
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
        second.stop_and_check()

    def test_a_descriptor_that_is_no_socket_is_refused_with_its_reason(self):
        done = subprocess.run(
            [bench_server_path(), "0", "--listen-fd", "0"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        self.assertEqual(done.returncode, 1)
        self.assertIn("cannot listen on descriptor 0", done.stderr)


class ForwardedTest(unittest.TestCase):
    """The test's connections come from 127.0.0.1 (trusted) or 127.0.0.5 (not)."""

    def test_x_forwarded_for_names_the_client_only_from_trusted_proxies(self):
        log = os.path.join(tempfile.mkdtemp(prefix="xk-forwarded-"), "access.log")
        args = ["--workers", "1", "--trust-forwarded", "127.0.0.1, 10.0.0.0/8"]
        server = start_server(self, [*args, "--access-log", log, "--log-flush-ms", "10"])
        xff = "X-Forwarded-For"
        cases = [
            ("127.0.0.1", [(xff, "192.0.2.44")], "192.0.2.44"),
            # What the client wrote left of the first untrusted hop is not believed.
            ("127.0.0.1", [(xff, "10.0.0.1, 198.51.100.7, 10.2.3.4")], "198.51.100.7"),
            ("127.0.0.1", [(xff, "203.0.113.1"), (xff, "198.51.100.8")], "198.51.100.8"),
            ("127.0.0.1", [(xff, "not-an-address, 10.9.9.9")], "10.9.9.9"),
            ("127.0.0.1", [(xff, "1.2.3.4 , garbage")], "127.0.0.1"),
            ("127.0.0.1", [("Forwarded", 'for="[2001:db8::9]:4711";proto=https')], "2001:db8::9"),
            # An untrusted peer's fields are ignored, whatever they say.
            ("127.0.0.5", [(xff, "10.0.0.1")], "127.0.0.5"),
            ("127.0.0.5", [("Forwarded", "for=10.0.0.1")], "127.0.0.5"),
            ("127.0.0.1", [], "127.0.0.1"),
        ]
        for source, headers, expected in cases:
            with self.subTest(source=source, headers=headers):
                self.assertEqual(whoami(server.port, headers, source)["address"], expected)
        server.stop_and_check()
        with open(log) as f:
            addresses = [line.split(" ", 1)[0] for line in f.read().splitlines()]
        self.assertEqual(addresses, [expected for _, _, expected in cases])

    def test_over_http2_too(self):
        server = start_server(self, ["--workers", "1", "--trust-forwarded", "127.0.0.1"])
        with H2Conn(server.port) as conn:
            resp = conn.fetch("GET", "/whoami", headers=[("x-forwarded-for", "6.6.6.6, 192.0.2.45")])
            self.assertEqual(json.loads(resp.body)["address"], "192.0.2.45")
        server.stop_and_check()

    def test_behind_haproxy_option_forwardfor(self):
        server = start_server(self, ["--workers", "1", "--trust-forwarded", "127.0.0.1"])
        edge = start_haproxy(self, [f"server xkit 127.0.0.1:{server.port}"], defaults=["option forwardfor"])
        self.assertEqual(whoami(edge.port, source="127.0.0.5")["address"], "127.0.0.5")
        spoofed = whoami(edge.port, [("X-Forwarded-For", "10.0.0.1")], source="127.0.0.5")
        self.assertEqual(spoofed["address"], "127.0.0.5")
        server.stop_and_check()


class ZeroDropBehindHaproxyTest(unittest.TestCase):
    """HAProxy with send-proxy-v2 and HTTP health checks on /healthz every 100 ms in front
    of two copies; wrk through it all along. Each copy is stopped (SIGTERM: its health
    check fails, HAProxy moves off during the grace, then it drains and exits) and
    started again, then one is restarted in place: the new copy first, on the same port."""

    def backend(self, port):
        args = ["--workers", "2", "--shared-port", "--health", "/healthz", "--stop-grace", "800"]
        args += ["--proxy-protocol", "127.0.0.1", "--shutdown-timeout", "2500"]
        return start_owned(self, ServerProcess(args, port=port))

    def test_restarts_under_load_fail_no_request(self):
        ports = {"a": free_port(), "b": free_port()}
        copies = {name: self.backend(port) for name, port in ports.items()}
        servers = [
            f"server {name} 127.0.0.1:{port} send-proxy-v2 check check-send-proxy inter 100ms fall 1 rise 2"
            for name, port in ports.items()
        ]
        edge = start_haproxy(self, ["option httpchk GET /healthz", "retries 0", *servers])
        for name in ports:
            edge.wait_status(name, "UP")
        wrk = start_wrk(self, ["-t1", "-c16", "-d60s", f"http://127.0.0.1:{edge.port}/ping"])
        time.sleep(1)
        for name in ports:  # each in turn: stopped, then started again
            copies[name].stop_and_check()
            copies[name] = self.backend(ports[name])
            edge.wait_status(name, "UP")
            time.sleep(0.3)
        old = copies["a"]  # in place: the new copy first
        copies["a"] = self.backend(ports["a"])
        time.sleep(0.3)
        old.stop_and_check()
        edge.wait_status("a", "UP")
        time.sleep(1)
        report, text = stop_wrk(wrk)
        self.assertEqual(report.problems, [], f"{text}\nhaproxy's log:\n{edge.log_text()}")
        self.assertGreater(report.requests, 1000, text)
        for copy in copies.values():
            copy.stop_and_check()


if __name__ == "__main__":
    unittest.main()
