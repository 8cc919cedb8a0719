"""Running a load generator: h2load's measured window read from its own output as it comes,
and a load generator that overruns its time killed and said to have timed out."""

import itertools
import unittest

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.loadgen import H2LOAD_OVER, H2LOAD_STARTED, stream

FAKE_H2LOAD = (
    f"echo 'Warm-up started for thread #0.'; echo '{H2LOAD_STARTED} for thread #0.'; "
    f"sleep 0.2; echo '{H2LOAD_OVER} for thread #0. Stopping all clients.'; "
    "echo 'finished in 1.00s, 10.00 req/s, 1B/s'"
)


class StreamTest(unittest.TestCase):
    def test_server_cpu_is_sampled_when_the_main_duration_starts_and_ends(self):
        readings = itertools.count(1)
        output, returncode, window, timed_out = stream(["sh", "-c", FAKE_H2LOAD], 10, 1, lambda: next(readings))
        self.assertEqual((returncode, window, timed_out), (0, (1, 2), False))
        self.assertTrue(output.endswith("finished in 1.00s, 10.00 req/s, 1B/s\n"))

    def test_with_two_threads_the_window_opens_when_both_have_started(self):
        script = FAKE_H2LOAD.replace("sleep 0.2;", f"echo '{H2LOAD_STARTED} for thread #1.';")
        readings = iter([10, 20, 30])
        _output, _code, window, _timed_out = stream(["sh", "-c", script], 10, 2, lambda: next(readings))
        self.assertEqual(window, (10, 20))

    def test_without_markers_there_is_no_window(self):
        _output, returncode, window, _timed_out = stream(["sh", "-c", "echo done"], 10, 0, lambda: 0)
        self.assertEqual((returncode, window), (0, None))

    def test_an_overrunning_load_generator_is_killed(self):
        _output, returncode, window, timed_out = stream(["sleep", "30"], 0.3, 1, lambda: 0)
        self.assertTrue(timed_out)
        self.assertEqual(returncode, -9)
        self.assertIsNone(window)


if __name__ == "__main__":
    unittest.main()
