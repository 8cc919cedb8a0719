"""File-descriptor exhaustion: a server at its RLIMIT_NOFILE sheds new
connections (closes them at once, without a response and without spinning),
keeps serving the ones it holds, and serves new clients again once fds free up."""

import resource
import socket
import threading
import time
import unittest

from support.harness import Conn, ServerProcess

HEADROOM = 24  # fds the server may open above its settled baseline
CLOCK_TICKS = 100  # /proc/PID/stat counts CPU time in USER_HZ, 100 on Linux
SATURATED_FOR = 3.0  # seconds of connection attempts against the full server


def cpu_seconds(pid):
    """The process's user + system CPU time so far (all threads)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def give_fds_back(server, hard):
    if server.is_running():
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (hard, hard))


def ping_on(conn):
    conn.request("GET", "/ping")
    resp = conn.read_response()
    return resp.status, resp.body


class FdExhaustionTest(unittest.TestCase):
    def start(self, workers):
        server = ServerProcess(["--workers", workers]).start()
        self.addCleanup(server.close)
        baseline = server.settle_fd_baseline()
        hard = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (baseline + HEADROOM, hard))
        # ASan's exit report may open files: give the room back before the stop.
        self.addCleanup(give_fds_back, server, hard)
        return server, hard

    def fill(self, server):
        """Opens connections until the server refuses one; the held ones each
        got a response. A refused one is closed with no byte of a response."""
        held = []
        for _ in range(HEADROOM * 3):
            conn = Conn(server.port, timeout=5)
            self.addCleanup(conn.close)
            try:
                conn.request("GET", "/ping")
                resp = conn.read_response()
            except (AssertionError, ConnectionResetError, BrokenPipeError):
                self.assertEqual(bytes(conn.buf), b"", "a shed connection got part of a response")
                self.assertTrue(conn.eof or conn.reset, "a shed connection hung instead of closing")
                return held
            self.assertEqual((resp.status, resp.body), (200, b"pong"))
            held.append(conn)
        self.fail(f"{len(held)} connections held and none refused: the fd limit did not apply")

    def knock(self, server, stop, outcomes):
        """New clients while the server is full: each must be closed at once."""
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                    outcomes.append(sock.recv(100))
            except (ConnectionResetError, BrokenPipeError):
                outcomes.append(b"")
            except OSError as err:
                outcomes.append(repr(err).encode())
            time.sleep(0.01)

    def check_sheds_without_spinning_and_recovers(self, workers):
        server, hard = self.start(workers)
        held = self.fill(server)
        self.assertGreater(len(held), HEADROOM // 2, f"only {len(held)} connections were served")

        stop, outcomes = threading.Event(), []
        knocker = threading.Thread(target=self.knock, args=(server, stop, outcomes), daemon=True)
        cpu_before = cpu_seconds(server.pid)
        knocker.start()
        time.sleep(SATURATED_FOR)
        stop.set()
        knocker.join(10)
        cpu_used = cpu_seconds(server.pid) - cpu_before
        self.assertGreater(len(outcomes), 20, "hardly any client could knock")
        self.assertEqual(set(outcomes), {b""}, f"knocks while full got {set(outcomes)}")
        # A busy loop would burn the whole window; shedding a knock costs microseconds.
        self.assertLess(cpu_used, SATURATED_FOR * 0.3, f"{cpu_used:.2f}s of CPU in {SATURATED_FOR}s while saturated")

        for conn in held:  # still served while full
            self.assertEqual(ping_on(conn), (200, b"pong"))
        for conn in held:
            conn.close()
        time.sleep(0.5)
        for _ in range(HEADROOM):
            with Conn(server.port, timeout=5) as conn:
                self.assertEqual(ping_on(conn), (200, b"pong"), "not served after fds were freed")
        server.assert_running()
        give_fds_back(server, hard)
        server.stop_and_check()

    def test_one_worker_sheds_new_connections_at_the_limit_and_recovers(self):
        self.check_sheds_without_spinning_and_recovers(1)

    def test_two_workers_shed_new_connections_at_the_limit_and_recover(self):
        self.check_sheds_without_spinning_and_recovers(2)


if __name__ == "__main__":
    unittest.main()
