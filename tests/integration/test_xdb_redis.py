"""xdb's Redis client and its cache-aside helper (include/xdb/redis.h,
redis_cache.h) against a real redis-server, started per test in a temporary
folder on a free loopback port: tests/xdb/redis_client.c runs one scenario per
test and checks every reply; this says what it must have seen. Every test runs
on both I/O backends (ctest's integration.NAME and integration.epoll.NAME).

- replies of every type, over TCP and over a Unix socket; binary values (NUL bytes, CR LF, 1 MiB); keys and
  values shaped like RESP ("\\r\\n*2\\r\\n$3\\r\\nDEL…") stored as bytes, nothing
  they spell run;
- 4,000 commands issued in one loop turn leave in a few writes and are
  answered in order;
- a command Redis holds (BLPOP) times out, the one behind it is failed, the
  connection is made again and work goes on at once;
- a connect that hangs (a listener whose backlog is full) is given up after
  connect_timeout_ms, the command waiting for it failed then, not at its own
  timeout;
- Redis killed under use: the command in flight fails, commands fail fast
  while it is down, and the client reconnects by itself once it is back;
- 4 s of commands (a tenth cancelled, some held by Redis until they time
  out) while Redis is killed and restarted twice: every callback runs once,
  no cancelled one runs, and the client is back at the end; cache gets
  meanwhile are each answered once, always with the loader's value;
- cancelled commands' callbacks never run; a client freed from within its
  callbacks (a reply, a timeout, a failure) tells the rest CLOSED;
- cache-aside: miss then hit, overlapping misses loaded once, TTL expiry,
  invalidate (also during a load), a failing loader; with Redis down every get
  is answered by the loader and none fails."""

import os
import re
import subprocess
import threading
import time
import unittest

from support.interop import RUN_TIMEOUT, free_port, program_path, run_program, temp_folder, tool_path
from support.redis_server import RedisServer


def backend():
    return "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"


class XdbRedisTest(unittest.TestCase):
    def setUp(self):
        self.program = program_path("xdb_redis_client", "hiredis (libhiredis-dev)")

    def run_scenario(self, scenario, port, *extra):
        output = run_program(self, [self.program, scenario, str(port), *extra], dict(os.environ))
        self.assertIn(f"ok {scenario} on {backend()}", output)
        return output

    def test_replies_of_every_type_binary_values_and_injection_shaped_bytes(self):
        redis = RedisServer(self)
        self.run_scenario("types", redis.port)
        self.assertTrue(redis.alive())

    def test_a_client_over_a_unix_socket(self):
        redis = RedisServer(self)
        output = run_program(self, [self.program, "unix", redis.unix_path], dict(os.environ))
        self.assertIn(f"ok unix on {backend()}", output)

    def test_commands_of_one_turn_leave_in_a_few_writes_in_order(self):
        redis = RedisServer(self)
        output = self.run_scenario("pipeline", redis.port, "2000")
        self.assertIn("4000 commands in one turn", output)

    def test_commands_of_one_turn_leave_in_one_write_system_call(self):
        # The client's own count, checked from outside: strace sees every write of a RESP
        # command (it starts with "*"). LeakSanitizer cannot run under ptrace.
        redis = RedisServer(self)
        trace = os.path.join(temp_folder(self), "trace")
        strace = [tool_path("strace"), "-f", "-e", "trace=write,writev,sendto,sendmsg", "-s", "8", "-o", trace]
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
        output = run_program(self, [*strace, self.program, "pipeline", str(redis.port), "2000"], env)
        self.assertIn("ok pipeline", output)
        with open(trace) as f:
            commands = [
                line for line in f if re.search(r'\b(write|writev|sendto|sendmsg)\(\d+, (\[\{iov_base=)?"\*', line)
            ]
        # A DEL before, the 4,000 commands, a GET after: 3 writes where the socket takes each turn's
        # buffer whole, a few more if it does not; one per command would be over 4,000.
        self.assertGreaterEqual(len(commands), 3, "".join(commands))
        self.assertLessEqual(len(commands), 10, "".join(commands[:20]))

    def test_a_command_that_times_out_costs_its_connection_not_the_client(self):
        redis = RedisServer(self)
        self.run_scenario("timeout", redis.port)

    def test_redis_killed_and_restarted_under_use(self):
        redis = RedisServer(self)
        proc = subprocess.Popen(
            [self.program, "restart", str(redis.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ),
        )
        # A program stuck waiting would hold the read below: killed after RUN_TIMEOUT.
        watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)
        watchdog.start()
        self.addCleanup(watchdog.cancel)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(proc.stdin.close)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "kill":
                redis.kill()
            elif line.strip() == "start":
                redis.start()
            else:
                continue
            proc.stdin.write("done\n")
            proc.stdin.flush()
        proc.wait(timeout=RUN_TIMEOUT)
        output = "".join(lines)
        self.assertEqual(proc.returncode, 0, output[-4000:])
        self.assertNotIn("Sanitizer", output)
        self.assertIn(f"ok restart on {backend()}", output)

    def test_a_connect_that_hangs_is_given_up_after_its_timeout(self):
        self.run_scenario("connect-timeout", 0)

    def test_chaos_commands_cancels_timeouts_and_redis_restarts_each_callback_once(self):
        redis = RedisServer(self)
        proc = subprocess.Popen(
            [self.program, "chaos", str(redis.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ),
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        # The program runs 4 s of commands; Redis goes away twice meanwhile.
        for down, up in ((1.0, 0.4), (1.0, 0.3)):
            time.sleep(down)
            redis.kill()
            time.sleep(up)
            redis.start()
        try:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            self.fail(f"chaos hung:\n{output[-4000:]}")
        self.assertEqual(proc.returncode, 0, output[-4000:])
        self.assertNotIn("Sanitizer", output)
        self.assertIn(f"ok chaos on {backend()}", output)
        connects = int(re.search(r"(\d+) connects", output).group(1))
        self.assertGreaterEqual(connects, 3, output[-2000:])  # the first, and one after each restart

    def test_a_cancelled_commands_callback_never_runs(self):
        redis = RedisServer(self)
        self.run_scenario("cancel", redis.port)

    def test_a_client_freed_from_its_own_callbacks(self):
        redis = RedisServer(self)
        self.run_scenario("free", redis.port)

    def test_cache_aside_hit_miss_coalescing_ttl_and_invalidate(self):
        redis = RedisServer(self)
        self.run_scenario("cache", redis.port)

    def test_cache_aside_with_redis_down_falls_back_to_the_loader(self):
        self.run_scenario("cache-down", free_port())


if __name__ == "__main__":
    unittest.main()
