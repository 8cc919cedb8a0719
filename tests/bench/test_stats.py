"""Medians and spreads of runs, failed cases kept out of them, and the comparisons (Δ, ratios)."""

import unittest

import support  # noqa: F401  (puts bench/ on the path)
from xkbench import stats


def run(rate, cpu, latency=1.0, ok=True):
    return {
        "ok": ok,
        "problems": [] if ok else ["wrk Socket errors: connect 0, read 3, write 0, timeout 0"],
        "requests": 1000,
        "req_per_s": rate,
        "latency_ms": latency,
        "latency_p50_ms": latency * 0.9,
        "latency_p99_ms": latency * 5,
        "cpu_us_per_request": cpu,
    }


class SpreadTest(unittest.TestCase):
    def test_median_of_odd_and_even_counts_with_min_and_max(self):
        self.assertEqual(stats.spread([3, 1, 2]), {"median": 2, "min": 1, "max": 3})
        self.assertEqual(stats.spread([4, 1, 2, 3]), {"median": 2.5, "min": 1, "max": 4})

    def test_missing_values_are_left_out_and_none_left_is_none(self):
        self.assertEqual(stats.spread([None, 5]), {"median": 5, "min": 5, "max": 5})
        self.assertIsNone(stats.spread([None]))
        self.assertIsNone(stats.spread([]))

    def test_relative_spread_is_range_over_median(self):
        self.assertAlmostEqual(stats.relative_spread({"median": 100, "min": 95, "max": 105}), 0.10)
        self.assertIsNone(stats.relative_spread(None))


class SummarizeTest(unittest.TestCase):
    def test_clean_runs_give_medians_of_every_metric(self):
        result = stats.summarize([run(100, 5.0, 2.0), run(300, 3.0, 1.0), run(200, 4.0, 3.0)])
        self.assertEqual(result["status"], "ok")
        self.assertIsNone(result["error"])
        self.assertEqual(result["req_per_s"], {"median": 200, "min": 100, "max": 300})
        self.assertEqual(result["cpu_us_per_request"]["median"], 4.0)
        self.assertEqual(result["latency_ms"]["median"], 2.0)
        self.assertEqual(result["latency_p50_ms"], {"median": 1.8, "min": 0.9, "max": 2.7})
        self.assertEqual(result["latency_p99_ms"]["median"], 10.0)
        self.assertEqual(len(result["runs"]), 3)

    def test_one_failed_run_fails_the_case_and_no_median_is_made(self):
        runs = [run(100, 5.0), run(100, 5.0, ok=False), run(100, 5.0)]
        result = stats.summarize(runs)
        self.assertEqual(result["status"], "failed")
        self.assertIn("Socket errors", result["error"])
        self.assertIsNone(result["req_per_s"])
        self.assertIsNone(stats.median_of(result, "req_per_s"))
        self.assertEqual(result["runs"], runs)  # the numbers are kept, not averaged in

    def test_no_runs_is_a_failure(self):
        self.assertEqual(stats.summarize([])["status"], "failed")


class ComparisonTest(unittest.TestCase):
    def test_delta_is_how_much_more_ours_is(self):
        self.assertAlmostEqual(stats.delta(150, 100), 0.5)
        self.assertAlmostEqual(stats.delta(50, 100), -0.5)

    def test_delta_and_ratio_need_both_sides(self):
        self.assertIsNone(stats.delta(None, 100))
        self.assertIsNone(stats.delta(100, None))
        self.assertIsNone(stats.ratio(100, 0))

    def test_median_ratio_over_rows_skips_rows_missing_a_side(self):
        ok = lambda rate: stats.summarize([run(rate, 1.0)])  # noqa: E731
        rows = [
            {"results": {"xkit": ok(200), "go": ok(100)}},
            {"results": {"xkit": ok(300), "go": ok(100)}},
            {"results": {"xkit": ok(900), "go": stats.summarize([run(1, 1, ok=False)])}},
            {"results": {"xkit": ok(400), "go": ok(100)}},
        ]
        self.assertEqual(stats.median_ratio(rows, "xkit", "go", "req_per_s"), {"median": 3.0, "min": 2.0, "max": 4.0})


if __name__ == "__main__":
    unittest.main()
