"""gRPC through the reverse proxy with grpc-go on both ends (support/grpcpeer,
built here): Go's gRPC server as the HTTP/2 upstream (--upstream-h2), Go's
gRPC client calling the front over h2c.

Checked as the client sees it, and the same as it sees calling the server
directly: a unary call (5 bytes and 1 MiB) with its header and trailer
metadata; status codes and messages a method returns (FAILED_PRECONDITION,
PERMISSION_DENIED) passed through as sent; a server stream of 50 messages
ending with trailer metadata, and one failing with INVALID_ARGUMENT; a
client stream of four messages (one of 1 MiB) summed; a bidirectional
stream of 100 messages each answered, with its trailer; an unknown
service's UNIMPLEMENTED. grpc-go wants a trailers-only answer (an error
before any message) in one HEADERS frame with END_STREAM: the front sends an
answer ended before any body that way."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from support.harness import ServerProcess, bench_server_path, start_owned

PEER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "grpcpeer")


class GrpcGoThroughTheProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if not os.path.exists(go):
            raise AssertionError("Go is needed for grpc-go (scripts/install-deps.sh)")
        cls.out = tempfile.mkdtemp()
        cls.peer = os.path.join(cls.out, "grpcpeer")
        done = subprocess.run([go, "build", "-o", cls.peer, "."], cwd=PEER_DIR, capture_output=True, timeout=300)
        if done.returncode:
            raise AssertionError("go build: " + done.stderr.decode())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, True)

    def setUp(self):
        self.upstream = subprocess.Popen([self.peer, "server"], stdout=subprocess.PIPE)
        self.addCleanup(self.upstream.stdout.close)
        self.addCleanup(self.upstream.wait)
        self.addCleanup(self.upstream.kill)
        self.upstream_port = int(self.upstream.stdout.readline())
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream_port}", "--upstream-h2"]
        args += ["--upstream-timeout", "10000"]
        # Without --test-routes: every call is proxied.
        self.front = start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args]))

    def call(self, port):
        done = subprocess.run([self.peer, "client", f"127.0.0.1:{port}"], capture_output=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        return json.loads(done.stdout)

    def test_unary_and_streaming_calls_with_trailers_and_statuses(self):
        got = self.call(self.front.port)
        echo = got["echo"]
        self.assertEqual((echo["code"], echo["replies"]), ("OK", ["5 bytes, hello"]))
        self.assertEqual((echo["headers"], echo["trailers"]), ({"x-head": "echo"}, {"x-tail": "5"}))
        big = got["echo_big"]
        self.assertEqual((big["code"], big["replies"]), ("OK", ["1048576 bytes, 01234567...89abcdef"]))
        self.assertEqual(big["trailers"], {"x-tail": "1048576"})
        self.assertEqual(
            (got["fail"]["code"], got["fail"]["message"]), ("FailedPrecondition", "the precondition is not met")
        )
        self.assertEqual((got["fail_denied"]["code"], got["fail_denied"]["message"]), ("PermissionDenied", "no entry"))
        count = got["count"]
        self.assertEqual((count["code"], count["replies"]), ("OK", [f"item {i}" for i in range(50)]))
        self.assertEqual(count["trailers"], {"x-count": "50"})
        self.assertEqual((got["count_bad"]["code"], got["count_bad"]["message"]), ("InvalidArgument", "not a count"))
        self.assertEqual((got["sum"]["code"], got["sum"]["replies"]), ("OK", [str(1 + 2 + 3 + (1 << 20))]))
        chat = got["chat"]
        self.assertEqual((chat["code"], chat["replies"]), ("OK", [f"MESSAGE {i}" for i in range(100)]))
        self.assertEqual(chat["trailers"], {"x-seen": "100"})
        self.assertEqual(got["unknown"]["code"], "Unimplemented")
        # Whatever the proxy passed on is what the client gets from the server itself.
        self.assertEqual(got, self.call(self.upstream_port))
        self.front.stop_and_check()


if __name__ == "__main__":
    unittest.main()
