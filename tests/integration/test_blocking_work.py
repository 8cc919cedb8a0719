"""Blocking work (xHttpRequestRunBlocking) in the bench server's GET /blocking?ms=N, which sleeps
N ms on a thread of the server's pool and answers from the request's worker: many concurrent
requests are all answered, each from its own worker's thread; the loop (and an HTTP/2
connection's other streams) keeps answering while the pool is busy; a full queue gets the
server's 503 with Retry-After (or the handler's own answer, --blocking-own-busy); a client that
leaves mid-work costs nothing (ASan); and a graceful stop with work queued exits 0, running the
queued work within its deadline and cancelling it past it, the worker's stop after all of it.
ThreadSanitizer runs this file too (make tsan): results cross from pool threads to workers."""

import json
import select
import signal
import threading
import time
import unittest

from support.h2client import H2Conn, rst_stream_frame
from support.harness import ServerTestCase, start_server
from support.worker_lines import stops

CANCEL = 0x8


def read_all(conns):
    """Each connection's next response, read in parallel; in the conns' order."""
    answers = [None] * len(conns)

    def read(i):
        try:
            answers[i] = conns[i].read_response()
        except AssertionError as err:
            answers[i] = err

    readers = [threading.Thread(target=read, args=(i,)) for i in range(len(conns))]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(30)
    return answers


class BlockingWorkTest(ServerTestCase):
    server_args = ["--workers", "2"]

    def check_answer(self, resp, ms):
        self.assertEqual(resp.status, 200, resp)
        a = json.loads(resp.body)
        self.assertEqual(a["ms"], ms, a)
        self.assertNotEqual(a["pool_tid"], a["handler_tid"], f"the work ran on the loop: {a}")
        self.assertEqual(a["done_tid"], a["handler_tid"], f"done ran off the request's worker: {a}")
        return a

    def test_many_concurrent_requests_are_all_answered_from_their_worker(self):
        conns = [self.connect() for _ in range(16)]
        pool_threads = set()
        for _ in range(4):
            for conn in conns:
                conn.request("GET", "/blocking?ms=5")
            for resp in read_all(conns):
                pool_threads.add(self.check_answer(resp, 5)["pool_tid"])
        self.assertLessEqual(len(pool_threads), 4, "more pool threads than the default 4")

    def test_many_concurrent_streams_on_one_http2_connection_are_all_answered(self):
        with H2Conn(self.server.port, self.server.connect_host) as h2:
            streams = h2.fetch_many([("GET", "/blocking?ms=5")] * 40)
        for stream in streams:
            resp = stream.response()
            self.assertEqual(resp.status, 200, resp)
            a = json.loads(resp.body)
            self.assertEqual(a["done_tid"], a["handler_tid"], a)


class BusyPoolTest(unittest.TestCase):
    def test_the_loop_answers_while_every_pool_thread_is_busy(self):
        server = start_server(self, ["--workers", 1, "--blocking-threads", 2])
        slow = [server.open_conn() for _ in range(3)]
        for conn in slow:
            self.addCleanup(conn.close)
            conn.request("GET", "/blocking?ms=2000")
        with server.open_conn() as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        readable, _, _ = select.select([c.sock for c in slow], [], [], 0)
        self.assertEqual(readable, [], "a 2-second job was answered before a /ping sent after it")
        for resp in read_all(slow):
            self.assertEqual(resp.status, 200, resp)
        server.stop_and_check()

    def test_an_http2_stream_is_answered_while_another_streams_work_runs(self):
        server = start_server(self, ["--workers", 1])
        with H2Conn(server.port, server.connect_host) as h2:
            slow = h2.request("GET", "/blocking?ms=1500")
            ping = h2.request("GET", "/ping")
            self.assertEqual(h2.read_response(ping).body, b"pong")
            self.assertFalse(h2.streams[slow].closed, "the slow stream ended before the /ping sent after it")
            self.assertEqual(h2.read_response(slow).status, 200)
        server.stop_and_check()

    def fill(self, args):
        """Five long jobs at once on a pool of 1 thread and room for 2 more; their answers."""
        server = start_server(self, ["--workers", 1, "--blocking-threads", 1, "--blocking-queue", 2, *args])
        conns = [server.open_conn() for _ in range(5)]
        for conn in conns:
            self.addCleanup(conn.close)
            conn.request("GET", "/blocking?ms=1000")
        answers = read_all(conns)
        with server.open_conn() as conn:  # the queue has drained: taken again
            conn.request("GET", "/blocking?ms=0")
            self.assertEqual(conn.read_response().status, 200)
        server.stop_and_check()
        return answers

    def test_a_full_queue_is_answered_503_with_retry_after(self):
        answers = self.fill([])
        taken = [a for a in answers if a.status == 200]
        refused = [a for a in answers if a.status != 200]
        # One running and two waiting at most; the first two always find room.
        self.assertIn(len(taken), (2, 3), answers)
        for resp in refused:
            self.assertEqual(resp.status, 503, resp)
            self.assertEqual(resp.header("retry-after"), "1", resp)
            self.assertEqual(resp.body, b"Service Unavailable\n")

    def test_a_full_queue_is_the_handlers_to_answer_when_the_server_is_told_so(self):
        answers = self.fill(["--blocking-own-busy"])
        refused = [a for a in answers if a.status != 200]
        self.assertIn(len(refused), (2, 3), answers)
        for resp in refused:
            self.assertEqual((resp.status, resp.body), (429, b"the pool is full\n"), resp)
            self.assertIsNone(resp.header("retry-after"), resp)


class StopAndLeaveTest(unittest.TestCase):
    def test_clients_that_leave_mid_work_are_told_to_done(self):
        server = start_server(self, ["--workers", 1, "--worker-hooks"])
        conn = server.open_conn()
        conn.request("GET", "/blocking?ms=1000")
        h2 = H2Conn(server.port, server.connect_host)
        reset = h2.request("GET", "/blocking?ms=1000")
        h2.request("GET", "/blocking?ms=1000")
        time.sleep(0.1)  # taken by the pool before the clients go
        conn.abort()
        h2.send(rst_stream_frame(reset, CANCEL))
        h2.abort()
        time.sleep(0.1)
        with server.open_conn() as other:
            other.request("GET", "/ping")
            self.assertEqual(other.read_response().body, b"pong")
        server.stop_and_check()  # while the work is still out: the stop waits for it
        (line,) = stops(server.stderr_text())
        self.assertEqual((line["blocking_done"], line["blocking_aborted"], line["blocking_out"]), (3, 3, 0), line)

    def test_a_graceful_stop_runs_the_queued_work_within_its_deadline(self):
        server = start_server(self, ["--workers", 1, "--blocking-threads", 1, "--worker-hooks"])
        conns = [server.open_conn() for _ in range(3)]
        for conn in conns:
            self.addCleanup(conn.close)
            conn.request("GET", "/blocking?ms=300")
        time.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        self.assertEqual([a.status for a in read_all(conns)], [200] * 3)
        server.assert_clean_exit(server.wait_exit(15))
        (line,) = stops(server.stderr_text())
        self.assertEqual((line["blocking_done"], line["blocking_cancelled"], line["blocking_out"]), (3, 0, 0), line)

    def test_a_graceful_stop_past_its_deadline_cancels_the_queued_work_and_exits_0(self):
        server = start_server(
            self, ["--workers", 1, "--blocking-threads", 1, "--shutdown-timeout", 200, "--worker-hooks"]
        )
        conns = [server.open_conn() for _ in range(3)]
        for conn in conns:
            self.addCleanup(conn.close)
            conn.request("GET", "/blocking?ms=1500")
        time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        for i, conn in enumerate(conns):
            self.assertEqual(conn.read_until_eof(), b"", f"connection {i} was answered past the deadline")
        server.assert_clean_exit(server.wait_exit(15))
        (line,) = stops(server.stderr_text())
        # The running one came back and was waited for; the two waiting never began.
        self.assertEqual((line["blocking_done"], line["blocking_cancelled"], line["blocking_out"]), (1, 2, 0), line)
        self.assertEqual(line["blocking_aborted"], 3, line)


if __name__ == "__main__":
    unittest.main()
