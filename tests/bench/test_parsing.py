"""wrk's and h2load's reports, as captured on this machine: what a clean run measured, and
every way a run is disqualified (errors, timeouts, bad statuses, nothing completed)."""

import unittest

import support
from xkbench.parsing import parse_h2load, parse_h2load_log, parse_wrk


def wrk(name):
    return parse_wrk(*support.fixture(name))


def h2load(name, protocol=None):
    return parse_h2load(*support.fixture(name), protocol=protocol)


class WrkTest(unittest.TestCase):
    def test_clean_run_gives_requests_rate_and_mean_latency(self):
        result = wrk("wrk_ping")
        self.assertEqual(result.problems, [])
        self.assertEqual(result.requests, 125566)
        self.assertAlmostEqual(result.req_per_s, 114149.14)
        self.assertAlmostEqual(result.latency_ms, 0.10157)

    def test_latency_distribution_gives_p50_and_p99(self):
        result = wrk("wrk_ping_latency")
        self.assertEqual(result.problems, [])
        self.assertAlmostEqual(result.latency_ms, 0.44907)
        self.assertAlmostEqual(result.latency_p50_ms, 0.189)
        self.assertAlmostEqual(result.latency_p99_ms, 4.88)
        slow = wrk("wrk_delay_latency")
        self.assertAlmostEqual(slow.latency_p50_ms, 8.44)
        self.assertAlmostEqual(slow.latency_p99_ms, 15.6)

    def test_without_latency_distribution_there_are_no_percentiles(self):
        result = wrk("wrk_ping")
        self.assertIsNone(result.latency_p50_ms)
        self.assertIsNone(result.latency_p99_ms)

    def test_a_distribution_with_zeros_gives_no_percentiles(self):
        # Pipelined, wrk's correction for coordinated omission leaves its 90% and 99% at 0.
        result = wrk("wrk_pipeline_latency")
        self.assertEqual(result.problems, [])
        self.assertAlmostEqual(result.latency_ms, 0.38251)
        self.assertEqual((result.latency_p50_ms, result.latency_p99_ms), (None, None))

    def test_latency_in_milliseconds_is_read_as_such(self):
        result = wrk("wrk_go_500")
        self.assertTrue(result.ok)
        self.assertAlmostEqual(result.latency_ms, 10.76)

    def test_scripted_runs_post_pipeline_and_https_are_clean(self):
        for name, requests in (("wrk_post", 112791), ("wrk_pipeline", 1047952), ("wrk_https", 46369)):
            with self.subTest(name):
                result = wrk(name)
                self.assertEqual(result.problems, [])
                self.assertEqual(result.requests, requests)

    def test_non_2xx_responses_fail_the_run(self):
        result = wrk("wrk_not_found")
        self.assertFalse(result.ok)
        self.assertIn("126244 responses with status >= 400", result.problems[0])

    def test_timeouts_fail_the_run_even_with_requests_done(self):
        result = wrk("wrk_timeout")
        self.assertEqual(result.requests, 20)
        self.assertEqual(result.problems, ["wrk Socket errors: connect 0, read 0, write 0, timeout 20"])

    def test_refused_connection_fails_with_wrks_own_words(self):
        result = wrk("wrk_refused")
        self.assertEqual(
            result.problems, ["wrk exited with 1: unable to connect to 127.0.0.1:23999 Connection refused"]
        )

    def test_a_silent_server_fails_as_no_requests(self):
        result = wrk("wrk_silent")
        self.assertEqual(result.problems, ["wrk completed no requests"])
        self.assertIsNone(result.latency_ms)

    def test_cut_off_output_is_unreadable_not_an_exception(self):
        stdout = support.fixture("wrk_ping")[0].split("Requests/sec")[0]
        self.assertIn("unreadable wrk output", parse_wrk(stdout).problems[0])


class H2loadTest(unittest.TestCase):
    def test_clean_run_counts_succeeded_requests_and_mean_latency(self):
        result = h2load("h2load_ping", "h2c")
        self.assertEqual(result.problems, [])
        self.assertEqual(result.requests, 453490)
        self.assertAlmostEqual(result.req_per_s, 453490.0)
        self.assertAlmostEqual(result.latency_ms, 0.354)
        self.assertEqual(result.statuses, {"2xx": 453490, "3xx": 0, "4xx": 0, "5xx": 0})
        self.assertIsNone(result.latency_p50_ms)

    def test_https_post_is_clean_over_h2(self):
        result = h2load("h2load_https_post", "h2")
        self.assertEqual(result.problems, [])
        self.assertEqual(result.requests, 15539)
        self.assertAlmostEqual(result.latency_ms, 12.53)

    def test_a_protocol_other_than_the_one_asked_for_fails(self):
        self.assertEqual(h2load("h2load_ping", "h2").problems, ["h2load spoke h2c, not h2"])

    def test_4xx_responses_fail_the_run(self):
        problems = h2load("h2load_not_found").problems
        self.assertIn("h2load: 436510 failed, 0 errored, 0 timeout", problems)
        self.assertIn("h2load saw responses other than 2xx: status codes: 0 2xx, 0 3xx, 436510 4xx, 0 5xx", problems)

    def test_errored_requests_fail_the_run(self):
        for name in ("h2load_errored", "h2load_refused_n"):
            with self.subTest(name):
                self.assertIn("h2load: 20 failed, 20 errored, 0 timeout", h2load(name).problems)

    def test_timeouts_fail_the_run(self):
        self.assertIn("h2load: 20 failed, 20 errored, 10 timeout", h2load("h2load_inactivity").problems)

    def test_timed_runs_that_complete_nothing_fail(self):
        # h2load -D exits 0 and counts nothing as failed when it cannot connect, or when
        # the server never answers within the duration.
        for name in ("h2load_refused", "h2load_timeout", "h2load_delay_timeout"):
            with self.subTest(name):
                self.assertEqual(h2load(name).problems, ["h2load completed no requests"])

    def test_nonzero_exit_and_unreadable_output_fail(self):
        self.assertEqual(
            parse_h2load("", "h2load: bad option\n", 1).problems, ["h2load exited with 1: h2load: bad option"]
        )
        self.assertIn("unreadable h2load output", parse_h2load("starting benchmark...\n").problems[0])


class H2loadLogTest(unittest.TestCase):
    """h2load prints no percentiles: they come from its --log-file, one line per request."""

    def test_captured_log_gives_nearest_rank_p50_and_p99_in_ms(self):
        log = (support.FIXTURES / "h2load_ping_logged.log").read_text()
        self.assertEqual(len(log.splitlines()), parse_h2load(*support.fixture("h2load_ping_logged")).requests)
        self.assertEqual(parse_h2load_log(log), (0.064, 0.24))

    def test_failed_streams_are_left_out(self):
        lines = [f"1795847511565875\t200\t{ms * 1000}" for ms in range(100, 0, -1)]
        lines.insert(7, "1795847511565875\t-1\t999999999")
        self.assertEqual(parse_h2load_log("\n".join(lines) + "\n"), (50.0, 99.0))

    def test_a_log_without_requests_gives_none(self):
        self.assertIsNone(parse_h2load_log(""))
        self.assertIsNone(parse_h2load_log("1795847511565875\t-1\t1500000\n"))


if __name__ == "__main__":
    unittest.main()
