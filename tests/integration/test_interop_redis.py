"""hiredis's asynchronous API on xKit's loop (tests/interop/interop_redis.c,
through hiredis_on_xkit.h): a real redis-server, started in a temporary
folder on a free loopback port, answers 3,000 commands pipelined at once
(SETs, INCRs, GETs, each reply checked), stores an 8 MB binary value and
gives it back whole, and then kills the connection on another's word, which
the first must hear as a disconnect while the second closes cleanly. Runs on
the backend XK_IO names, as every test."""

import os
import unittest

from support.interop import program_path, run_program
from support.redis_server import RedisServer

BIG_BYTES = 8 * 1024 * 1024


class HiredisAsyncTest(unittest.TestCase):
    def setUp(self):
        self.program = program_path("interop_redis", "hiredis (libhiredis-dev)")
        self.redis = RedisServer(self)
        self.port = self.redis.port

    def test_pipelined_commands_a_large_value_and_a_disconnect(self):
        output = run_program(self, [self.program, str(self.port), "1000", str(BIG_BYTES)], dict(os.environ))
        self.assertIn("ok: 3002 replies, a 8388608-byte value, and a disconnect", output)
        want = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"
        self.assertIn(f"on {want}", output)
        self.assertTrue(self.redis.alive(), "redis-server died")


if __name__ == "__main__":
    unittest.main()
