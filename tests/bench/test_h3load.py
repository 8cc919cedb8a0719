"""bench/h3load, the HTTP/3 load generator, against this build's https_bench_server: its summary
reads through xkbench's h2load parser and its counts are the requests asked for, for GET and for
POST with a body, with and without a QPACK dynamic table; -i asks a file's paths in turn and -H adds
headers, as h2load's; -D marks the main duration as h2load does; a port where nothing listens fails.
It sends runs of packets with UDP_SEGMENT and reads with UDP_GRO, as quic-go's client does, unless
told not to (strace shows which)."""

import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.loadgen import H2LOAD_OVER, H2LOAD_STARTED
from xkbench.parsing import parse_h2load
from xkbench.prepare import make_certificate
from xkbench.servers import Peer, PortPicker, running

H3LOAD = os.environ.get("XK_H3LOAD")
SERVER = os.environ.get("XK_HTTPS_SERVER")
RUN_TIMEOUT = 60


def h3load(*args):
    done = subprocess.run([H3LOAD, "-t1", *args], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return done, parse_h2load(done.stdout, done.stderr, done.returncode)


class H3LoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not H3LOAD or not SERVER:
            raise AssertionError("XK_H3LOAD and XK_HTTPS_SERVER name the binaries (ctest sets them)")
        cls.tmp = tempfile.TemporaryDirectory(prefix="xk-h3load-")
        work_dir = Path(cls.tmp.name)
        cert, key = make_certificate(work_dir)
        peer = Peer("xkit", lambda port, _dir: [SERVER, str(port), str(cert), str(key), "--workers", "1"], tls=True)
        cls.context = running(peer, PortPicker(27100), work_dir, set(os.sched_getaffinity(0)), "h3load")
        cls.server = cls.context.__enter__()
        cls.base = f"https://127.0.0.1:{cls.server.port}"

    @classmethod
    def tearDownClass(cls):
        cls.context.__exit__(None, None, None)
        cls.tmp.cleanup()

    def test_get_requests_are_counted_and_parse(self):
        done, result = h3load("-c3", "-m8", "-n", "300", f"{self.base}/ping")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(result.ok, result.problems)
        self.assertEqual(result.requests, 300)
        self.assertEqual(result.statuses, {"2xx": 300, "3xx": 0, "4xx": 0, "5xx": 0})
        self.assertIn("requests: 300 total, 300 started, 300 done, 300 succeeded, 0 failed", done.stdout)
        self.assertGreater(result.req_per_s, 0)
        self.assertIsNotNone(result.latency_ms)

    def test_with_a_qpack_table_the_servers_indexed_answers_are_read(self):
        # The server keeps repeated response fields in the table h3load allows; h3load's decoder
        # follows its encoder stream and acknowledges each section (a wrong table or a missing
        # acknowledgment fails the sections that refer to it, or stalls the run).
        done, result = h3load("-c2", "-m16", "-n", "2000", "--qpack-capacity=4096", f"{self.base}/ping")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(result.statuses, {"2xx": 2000, "3xx": 0, "4xx": 0, "5xx": 0}, done.stdout)
        done, result = h3load(
            "-c1", "-m4", "-n", "40", "--qpack-capacity=4096", "--body-size=65536", f"{self.base}/echo"
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(result.statuses, {"2xx": 40, "3xx": 0, "4xx": 0, "5xx": 0}, done.stdout)

    def test_post_bodies_are_sent_and_answered(self):
        done, result = h3load("-c2", "-m4", "-n", "40", "--body-size=65536", f"{self.base}/echo")
        self.assertTrue(result.ok, result.problems + [done.stderr])
        self.assertEqual((result.requests, result.statuses["2xx"]), (40, 40))

    def offloads(self, *options):
        """(sendmsg calls with a UDP_SEGMENT control message, setsockopt calls turning UDP_GRO on)
        in a POST run of h3load with options, as strace saw them."""
        with tempfile.TemporaryDirectory() as folder:
            trace = Path(folder) / "trace"
            argv = ["strace", "-f", "-e", "trace=sendmsg,setsockopt", "-o", str(trace), H3LOAD, "-t1", "-c2"]
            argv += ["-m4", "-n", "20", "--body-size=65536", *options, f"{self.base}/echo"]
            # LeakSanitizer cannot work under ptrace: off for this run of an ASan build.
            environment = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
            done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environment)
            result = parse_h2load(done.stdout, done.stderr, done.returncode)
            self.assertEqual((result.requests, result.statuses.get("2xx")), (20, 20), done.stdout + done.stderr)
            text = trace.read_text()
        segment = len(re.findall(r"sendmsg\(.*cmsg_level=SOL_UDP, cmsg_type=(?:UDP_SEGMENT|0x67)", text))
        return segment, len(re.findall(r"setsockopt\(\d+, SOL_UDP, UDP_GRO, \[1\]", text))

    def test_posts_go_out_in_gso_runs_and_come_in_with_gro(self):
        segment_sends, gro_sockets = self.offloads()
        self.assertGreater(segment_sends, 10)
        self.assertEqual(gro_sockets, 2)

    def test_without_offloads_posts_are_answered_alike(self):
        self.assertEqual(self.offloads("--no-gso", "--no-gro"), (0, 0))

    def test_a_missing_path_is_counted_as_4xx(self):
        done, result = h3load("-c1", "-m4", "-n", "20", f"{self.base}/no-such-route")
        self.assertEqual(result.statuses["4xx"], 20, done.stdout)
        self.assertIn("20 done, 0 succeeded", done.stdout)

    def test_a_uri_file_is_asked_in_turn(self):
        with tempfile.NamedTemporaryFile("w", suffix=".uris") as uris:
            uris.write(f"{self.base}/ping\n{self.base}/no-such-route\n")
            uris.flush()
            done, result = h3load(
                "-c2", "-m4", "-n", "40", "-H", "Accept-Encoding: br;q=1, gzip;q=0.8", "-i", uris.name
            )
        self.assertEqual(result.statuses, {"2xx": 20, "3xx": 0, "4xx": 20, "5xx": 0}, done.stdout + done.stderr)

    def test_a_header_without_a_colon_is_refused(self):
        done, _ = h3load("-c1", "-m1", "-n", "1", "-H", "no-colon", f"{self.base}/ping")
        self.assertEqual(done.returncode, 2)
        self.assertIn("usage", done.stderr)

    def test_a_timed_run_marks_its_main_duration(self):
        done, result = h3load("-c2", "-m8", "-D", "1", "--warm-up-time=0.3", f"{self.base}/ping")
        self.assertTrue(result.ok, result.problems)
        self.assertLess(done.stdout.index(H2LOAD_STARTED), done.stdout.index(H2LOAD_OVER))
        self.assertGreater(result.requests, 0)

    def test_nothing_listening_fails(self):
        port = PortPicker(27600).take()
        done, result = h3load("-c1", "-m1", "-n", "5", f"https://127.0.0.1:{port}/ping")
        self.assertNotEqual(done.returncode, 0)
        self.assertFalse(result.ok)


if __name__ == "__main__":
    unittest.main()
