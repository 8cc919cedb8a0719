"""Four workers under load from several clients at once, while every path that
crosses threads runs: /metrics sums the other workers' counters, SIGHUP
reloads the certificate under handshakes in flight, SIGUSR1 posts a log reopen
to each worker, four workers append to one access log, and SIGTERM stops the
server while clients still send. Clients see every answer; the counters add
up; the server exits 0 with a clean stderr.

This is the suite's ThreadSanitizer test: `make tsan` (and `make test`) run it
against the build-tsan binaries, where any data race ends the server with
TSan's exit code and its report on stderr."""

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from support.harness import MISSING_TOOL, STOP_TIMEOUT
from support.loadgen import parse_h2load, parse_wrk
from support.tls_fixtures import HttpsServer, TlsConn, client_context, replace_file, shared_certs
from test_observe import metrics, read_lines

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

WORKERS = 4
LOAD_SECONDS = 3
CLIENT_TIMEOUT = 120  # h2load's fixed counts, on a sanitizer build on 2 shared cores
WAIT = 10.0


def requests_counted(samples):
    return sum(value for (name, _), value in samples.items() if name == "xkit_requests_total")


class Clients:
    """Load generators started together: each a process, killed at cleanup."""

    def __init__(self, test):
        self.test = test
        self.procs = {}

    def start(self, name, argv):
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            self.test.fail(MISSING_TOOL.format(argv[0]))
        self.test.addCleanup(self._kill, proc)
        self.procs[name] = proc

    @staticmethod
    def _kill(proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    def finish(self, name):
        """The client's stdout once it has exited 0."""
        proc = self.procs.pop(name)
        try:
            out, err = proc.communicate(timeout=CLIENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.test.fail(f"{name} did not finish within {CLIENT_TIMEOUT}s: {out!r} {err!r}")
        self.test.assertEqual(proc.returncode, 0, f"{name}: {err.decode(errors='replace')}")
        return out


class Handshakes(threading.Thread):
    """A fresh TLS connection after another, each with one request, until
    stopped: handshakes in flight whenever SIGHUP swaps the certificate."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.done = 0
        self.failures = []
        self.stopping = threading.Event()

    def run(self):
        context = client_context()
        while not self.stopping.is_set():
            try:
                with TlsConn(self.port, context) as conn:
                    conn.request("GET", "/ping")
                    resp = conn.read_response()
                if resp.body != b"pong":
                    self.failures.append(repr(resp))
                self.done += 1
            except (OSError, AssertionError) as err:
                self.failures.append(repr(err))
                return

    def stop(self):
        self.stopping.set()
        self.join(WAIT)
        return self.done, self.failures


class WorkersUnderLoadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="xk-workers-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.live = CERTS.copy(CERTS.ec, "live-workers")
        self.log = os.path.join(self.dir, "access.log")
        static = os.path.join(self.dir, "static")
        os.mkdir(static)
        self.files = {"small.txt": b"s" * 1000, "large.bin": os.urandom(200_000)}
        for name, data in self.files.items():
            with open(os.path.join(static, name), "wb") as out:
                out.write(data)
        self.server = HttpsServer(
            self.live,
            [
                "--workers",
                WORKERS,
                "--plain-port",
                "0",
                "--metrics",
                "--access-log",
                self.log,
                "--log-format",
                "json",
                "--static",
                static,
                "--compress",
                "--shutdown-timeout",
                "10000",
            ],
        )
        self.server.start()
        self.addCleanup(self.server.close)
        self.addCleanup(self.report_early_exit)
        self.assertEqual(self.server.workers, WORKERS)
        self.plain = f"http://127.0.0.1:{self.server.plain_port}"
        self.tls = f"https://127.0.0.1:{self.server.port}"

    def report_early_exit(self):
        """A server that ended before its stop (TSan ends it at a race) fails
        the test with its stderr, whatever a client saw first."""
        if self.server.proc.poll() not in (None, 0):
            self.fail(f"the server exited with {self.server.proc.returncode}:\n{self.server.stderr_tail()}")

    def plain_metrics(self):
        return metrics(self.server.plain_port)

    def wait_for(self, condition, what):
        deadline = time.monotonic() + WAIT
        while not condition():
            self.server.assert_running()
            if time.monotonic() > deadline:
                self.fail(f"waited {WAIT}s for {what}; stderr:\n{self.server.stderr_tail()}")
            time.sleep(0.05)

    def wait_for_stderr(self, text, occurrences):
        self.wait_for(lambda: self.server.stderr_text().count(text) >= occurrences, f"{occurrences} {text!r}")

    def start_load(self, clients):
        """Every protocol on every worker: HTTP/1.1 keep-alive and static files,
        h2c, HTTPS/2 with gzip, and fresh TLS handshakes one after another."""
        clients.start("wrk", ["wrk", "-t2", "-c16", f"-d{LOAD_SECONDS}s", f"{self.plain}/ping"])
        clients.start(
            "h2load static",
            [
                "h2load",
                "--h1",
                "-n",
                "600",
                "-c",
                "4",
                f"{self.plain}/static/small.txt",
                f"{self.plain}/static/large.bin",
            ],
        )
        clients.start("h2load h2c", ["h2load", "-n", "3000", "-c", "4", "-m", "8", f"{self.plain}/ping"])
        clients.start(
            "h2load https",
            ["h2load", "-n", "1500", "-c", "8", "-m", "4", "-H", "Accept-Encoding: gzip", f"{self.tls}/json"],
        )
        handshakes = Handshakes(self.server.port)
        handshakes.start()
        return handshakes

    def check_h2load(self, clients, name, requests):
        text = clients.finish(name).decode("utf-8", "replace")
        report = parse_h2load(text)
        self.assertEqual(report.problems, [], text)  # no failed, errored or timed-out stream, all 2xx
        self.assertEqual((report.requests, report.statuses["2xx"]), (requests, requests), text)
        return requests

    def test_load_with_metrics_reload_reopen_then_a_graceful_stop_under_load(self):
        clients = Clients(self)
        handshakes = self.start_load(clients)

        # While it runs: a reload of the same files at once and of new ones a
        # second later, the log moved and reopened, and /metrics read all along:
        # its sums never go back, the open connections never wrap.
        self.server.send_signal(signal.SIGHUP)
        os.rename(self.log, self.log + ".1")
        self.server.send_signal(signal.SIGUSR1)
        samples = [self.plain_metrics()]
        swap_at = time.monotonic() + 1
        while clients.procs["wrk"].poll() is None:
            if swap_at and time.monotonic() > swap_at:
                replace_file(self.live.cert, CERTS.ec_next.cert)
                replace_file(self.live.key, CERTS.ec_next.key)
                self.server.send_signal(signal.SIGHUP)
                swap_at = None
            samples.append(self.plain_metrics())
            time.sleep(0.1)
        for before, after in itertools.pairwise(samples):
            self.assertLessEqual(requests_counted(before), requests_counted(after))
            self.assertLess(after[("xkit_connections_open", ())], 1 << 20)
        self.wait_for_stderr("TLS certificates reloaded", 2)
        self.wait_for(lambda: os.path.exists(self.log), "SIGUSR1 to reopen the log's path")

        text = clients.finish("wrk").decode("utf-8", "replace")
        wrk = parse_wrk(text)
        self.assertGreater(wrk.requests, 100, text)
        self.assertEqual(wrk.problems, [], text)  # no socket error, nothing >= 400
        answered = wrk.requests + len(samples)
        answered += self.check_h2load(clients, "h2load static", 600)
        answered += self.check_h2load(clients, "h2load h2c", 3000)
        answered += self.check_h2load(clients, "h2load https", 1500)
        done, failures = handshakes.stop()
        self.assertEqual(failures, [])
        self.assertGreater(done, 0)
        answered += done
        # wrk may leave requests in flight when its time is up: they count too.
        self.assertGreaterEqual(requests_counted(self.plain_metrics()), answered)

        # A new connection gets the reloaded certificate.
        with TlsConn(self.server.port, client_context()) as conn:
            self.assertIn(b"xKit Reloaded", conn.peer_der())

        # The graceful stop, with every worker busy.
        clients.start("wrk", ["wrk", "-t2", "-c16", "-d60s", f"{self.plain}/ping"])
        clients.start("h2load https", ["h2load", "-D", "60", "-c", "4", "-m", "4", f"{self.tls}/ping"])
        handshakes = Handshakes(self.server.port)
        handshakes.start()
        busy = requests_counted(self.plain_metrics())
        deadline = time.monotonic() + WAIT
        while requests_counted(self.plain_metrics()) < busy + 1000 and time.monotonic() < deadline:
            time.sleep(0.1)
        # Exit 0, and no sanitizer's report on stderr (TSan's included).
        self.server.stop_and_check(signal.SIGTERM, STOP_TIMEOUT)
        handshakes.stop()  # refused once the listeners close: not a failure here

        # Four workers appended to two files: whole JSON lines, none cut or interleaved.
        lines = read_lines(self.log + ".1") + read_lines(self.log)
        self.assertGreaterEqual(len(lines), answered)
        for line in lines:
            self.assertEqual(json.loads(line)["status"], 200, line)


if __name__ == "__main__":
    unittest.main()
