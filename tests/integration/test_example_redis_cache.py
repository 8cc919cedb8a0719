"""examples/redis_cache.c as its users run it: 2 workers, each with its own
Redis client and cache, in front of a real redis-server (started in a
temporary folder on a free port) and an origin that answers in 100 ms.

Reads miss then hit (X-Cache), a DELETE invalidates, clients that leave while
their request waits on a load or on a command Redis holds cancel it (the
server stays sanitizer-clean: no reply reaches a response that is gone, and
the load still fills the cache), Redis killed leaves reads answered by the
origin and the PING route 503, and Redis restarted is found again by itself.
The server stops with SIGTERM, exit 0 and no sanitizer report."""

import http.client
import os
import time
import unittest

from support.harness import ServerProcess, start_owned
from support.redis_server import RedisServer

TIMEOUT = 15


class RedisCacheExampleTest(unittest.TestCase):
    def setUp(self):
        build = os.environ.get("XK_BUILD_DIR")
        if not build:
            raise AssertionError("XK_BUILD_DIR is not set; run this test through ctest")
        self.redis = RedisServer(self)
        binary = os.path.join(build, "examples", "redis_cache")
        self.server = start_owned(self, ServerProcess(argv=[binary, "0", "2", str(self.redis.port)]))

    def get(self, method, target):
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=TIMEOUT)
        try:
            conn.request(method, target)
            resp = conn.getresponse()
            return resp.status, resp.getheader("X-Cache"), resp.read()
        finally:
            conn.close()

    def expect(self, method, target, status, cache=None):
        """The response to method target, checked: its status and X-Cache, with the server's log on failure."""
        got = self.get(method, target)
        self.assertEqual(got[:2], (status, cache), f"{method} {target}; server log:\n{self.server.stderr_tail()}")
        return got[2]

    def expect_hit(self, target):
        """A GET of target is a hit. The cache's SET is not waited for (a miss is answered at once),
        so a read on another worker's connection right after a miss may miss too: a few tries."""
        for _ in range(20):
            status, cache, body = self.get("GET", target)
            if (status, cache) == (200, "HIT"):
                return body
            self.assertEqual((status, cache), (200, "MISS"), self.server.stderr_tail())
            time.sleep(0.01)
        self.fail(f"GET {target} never hit; server log:\n{self.server.stderr_tail()}")

    def wait_for_redis(self, status):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.get("GET", "/redis")[0] == status:
                return
            time.sleep(0.05)
        self.fail(f"GET /redis never answered {status}")

    def test_reads_invalidation_clients_leaving_and_redis_down(self):
        self.wait_for_redis(200)
        body = b'{"id":7,"quote":"Quote number 7"}'
        self.assertEqual(self.expect("GET", "/quotes/7", 200, "MISS"), body)
        self.assertEqual(self.expect_hit("/quotes/7"), body)
        self.expect("DELETE", "/quotes/7", 204)
        self.assertEqual(self.expect("GET", "/quotes/7", 200, "MISS"), body)
        self.expect("GET", "/quotes/x7", 404)

        # Clients that leave while their request waits: on a load, on a command Redis holds.
        for target in ("/quotes/8", "/wait/1", "/quotes/9", "/wait/1"):
            conn = self.server.open_conn()
            conn.request("GET", target)
            time.sleep(0.03)  # read by then; the origin answers at 100 ms, Redis the BLPOP at 1 s
            conn.abort()
        time.sleep(1.5)  # the loads and the BLPOPs end meanwhile, with nobody to answer
        self.server.assert_running()
        # The loads whose clients left still filled the cache.
        self.assertEqual(self.redis.command("EXISTS", "quote:8", "quote:9"), b":2")
        self.expect("GET", "/quotes/8", 200, "HIT")
        self.expect("GET", "/wait/1", 204)

        # Redis gone: reads are answered by the origin, the PING route says 503.
        self.redis.kill()
        self.assertEqual(self.expect("GET", "/quotes/10", 200, "MISS"), b'{"id":10,"quote":"Quote number 10"}')
        self.expect("GET", "/quotes/8", 200, "MISS")
        self.wait_for_redis(503)
        self.expect("DELETE", "/quotes/8", 503)
        # Back (empty: nothing was saved), each worker finds it again by itself.
        self.redis.start()
        self.wait_for_redis(200)
        self.expect("GET", "/quotes/7", 200, "MISS")
        self.expect_hit("/quotes/7")
        for _ in range(8):  # connections spread over both workers
            self.expect("GET", "/quotes/7", 200, "HIT")
        self.server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
