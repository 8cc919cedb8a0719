"""Per-worker hooks (xHttpServerOnWorker) in the bench server's --worker-hooks: each worker's
start and stop run once, on that worker's own thread; the state its start made reaches the
handlers of that worker only (GET /worker counts per worker, over HTTP/1.1 and HTTP/2); a
failing start makes the server exit 1 with the reason, the other workers stopping cleanly; and
under load, a graceful stop runs each worker's stop only after its last request finished."""

import json
import signal
import subprocess
import threading
import time
import unittest

from support.h2client import H2Conn
from support.harness import start_server
from support.worker_lines import starts, stops

WORKERS = 3


class WorkerHooksTest(unittest.TestCase):
    """Each test owns its server: what it checks is written as the server stops."""

    def stop_and_read(self, server):
        server.stop_and_check()
        return server.stderr_text()

    def test_each_worker_starts_and_stops_once_on_its_own_thread_and_its_state_reaches_only_its_handlers(self):
        server = start_server(self, ["--workers", WORKERS, "--worker-hooks"])
        # Connections open at once, so the kernel spreads them over the workers.
        conns = [server.open_conn() for _ in range(24)]
        for conn in conns:
            self.addCleanup(conn.close)
        answers = []
        for _ in range(2):
            for conn in conns:
                conn.request("GET", "/worker")
                resp = conn.read_response()
                self.assertEqual(resp.status, 200, resp)
                answers.append(json.loads(resp.body))
        with H2Conn(server.port, server.connect_host) as h2:
            answers += [json.loads(s.response().body) for s in h2.fetch_many([("GET", "/worker")] * 6)]
        by_worker = {}
        for a in answers:
            self.assertEqual(a["tid"], a["start_tid"], f"a handler got another thread's state: {a}")
            self.assertEqual(a["index"], a["worker"], a)
            self.assertTrue(a["loop"], a)
            by_worker.setdefault(a["worker"], []).append(a)
        self.assertGreaterEqual(len(by_worker), 2, f"24 connections reached one worker: {by_worker.keys()}")
        for worker, seen in by_worker.items():
            self.assertEqual(len({a["tid"] for a in seen}), 1, f"worker {worker} answered from several threads")
            # Each worker counts its own requests, and only those.
            self.assertEqual(sorted(a["requests"] for a in seen), list(range(1, len(seen) + 1)), seen)
        tids = {worker: seen[0]["tid"] for worker, seen in by_worker.items()}
        self.assertEqual(len(set(tids.values())), len(tids), f"two workers share a thread: {tids}")

        stderr = self.stop_and_read(server)
        started = starts(stderr)
        self.assertEqual(sorted(w for w, _ in started), list(range(WORKERS)), stderr)
        stopped = {line["worker"]: line for line in stops(stderr)}
        self.assertEqual(len(stops(stderr)), WORKERS, stderr)
        for worker, start_tid in started:
            line = stopped[worker]
            self.assertEqual(line["tid"], start_tid, f"worker {worker} stopped on another thread: {line}")
            self.assertEqual(line["start_tid"], start_tid, line)
            self.assertEqual(line["requests"], len(by_worker.get(worker, [])), line)
            if worker in tids:
                self.assertEqual(tids[worker], start_tid, line)

    def test_a_failing_start_makes_the_server_exit_1_with_the_reason(self):
        server = start_server(self, ["--workers", WORKERS, "--worker-hooks", "--worker-fail-start", "1"])
        code = server.wait_exit(15)
        stderr = server.stderr_text()
        self.assertEqual(code, 1, stderr)
        self.assertIn("http_bench_server: worker 1: start failed: refused by --worker-fail-start", stderr)
        self.assertEqual(server.sanitizer_reports(), [], stderr)
        started = dict(starts(stderr))
        self.assertEqual(sorted(started), [0, 2], stderr)
        stopped = stops(stderr)
        self.assertEqual(sorted(line["worker"] for line in stopped), [0, 2], stderr)
        for line in stopped:
            self.assertEqual(line["tid"], started[line["worker"]], line)
            self.assertEqual(line["requests"], 0, line)

    def test_a_graceful_stop_under_load_runs_stop_after_each_workers_last_request(self):
        server = start_server(self, ["--workers", 2, "--worker-hooks", "--shutdown-timeout", 10000])
        wrk = subprocess.Popen(
            ["wrk", "-t1", "-c20", "-d5s", server.url("/ping")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.addCleanup(wrk.wait, 10)
        self.addCleanup(wrk.kill)
        slow = [server.open_conn() for _ in range(8)]
        for conn in slow:
            self.addCleanup(conn.close)
            conn.request("GET", "/blocking?ms=600")
        time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        answers = []

        def read(conn):
            answers.append(conn.read_response())

        readers = [threading.Thread(target=read, args=(conn,)) for conn in slow]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(30)
        self.assertEqual([a.status for a in answers], [200] * 8, answers)
        for a in answers:
            self.assertIn("close", a.tokens("connection"))
        server.assert_clean_exit(server.wait_exit(15))
        stopped = stops(server.stderr_text())
        self.assertEqual(len(stopped), 2, server.stderr_tail())
        # Every blocking request had come back, and been answered, when its worker stopped.
        self.assertEqual(sum(line["blocking_done"] for line in stopped), 8, stopped)
        for line in stopped:
            self.assertEqual((line["blocking_out"], line["blocking_cancelled"]), (0, 0), line)


if __name__ == "__main__":
    unittest.main()
