"""hiredis's asynchronous API on xKit's loop (tests/interop/interop_redis.c,
through hiredis_on_xkit.h): a real redis-server, started in a temporary
folder on a free loopback port, answers 3,000 commands pipelined at once
(SETs, INCRs, GETs, each reply checked), stores an 8 MB binary value and
gives it back whole, and then kills the connection on another's word, which
the first must hear as a disconnect while the second closes cleanly. Runs on
the backend XK_IO names, as every test."""

import os
import subprocess
import unittest

from support.interop import free_port, program_path, run_program, stop, temp_folder, tool_path, wait_for_port

BIG_BYTES = 8 * 1024 * 1024


class HiredisAsyncTest(unittest.TestCase):
    def setUp(self):
        self.program = program_path("interop_redis", "hiredis (libhiredis-dev)")
        redis = tool_path("redis-server")
        folder = temp_folder(self)
        self.port = free_port()
        log_path = os.path.join(folder, "redis.log")
        argv = [redis, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", folder, "--save", ""]
        argv += ["--appendonly", "no", "--daemonize", "no", "--logfile", log_path]
        self.server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.addCleanup(stop, self.server)
        wait_for_port(self.port, self.server, "redis-server", log_path)

    def test_pipelined_commands_a_large_value_and_a_disconnect(self):
        output = run_program(self, [self.program, str(self.port), "1000", str(BIG_BYTES)], dict(os.environ))
        self.assertIn("ok: 3002 replies, a 8388608-byte value, and a disconnect", output)
        want = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"
        self.assertIn(f"on {want}", output)
        self.assertIsNone(self.server.poll(), "redis-server died")


if __name__ == "__main__":
    unittest.main()
