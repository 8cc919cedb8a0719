"""xkbench arena --score: HttpArena's per-profile scores and composite (xkbench/arena_score.py),
computed exactly on a fixed small summary, and --score-from on a report file."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench import arena_score
from xkbench.cli import build_parser
from xkbench.commands import arena


def figures(**values):
    return {key: {"median": value} for key, value in values.items()}


# baseline by req/s; latency-1m as a paced profile: xKit best on every term; Go at half of 95% of
# the offered rate, twice the CPU, ten times the p99 and the same p99.9; pipelined is reference-only.
SUMMARY = {
    "baseline": {
        "xkit": figures(req_per_s=100000.0),
        "h2o": figures(req_per_s=50000.0),
        "nginx": figures(req_per_s=25000.0),
    },
    "pipelined": {"xkit": figures(req_per_s=900000.0), "nginx": figures(req_per_s=100000.0)},
    "latency-1m": {
        "xkit": figures(req_per_s=15600.0, target_rate=15625, cpu_us_per_request=8.0, p99_us=1000.0, p999_us=2000.0),
        "go": figures(req_per_s=7421.875, target_rate=15625, cpu_us_per_request=16.0, p99_us=10000.0, p999_us=2000.0),
    },
}
SERVERS = ["xkit", "go", "h2o", "nginx"]


class ScoreTest(unittest.TestCase):
    def test_throughput_profiles_score_req_per_s_over_the_best(self):
        scored = arena_score.score(SUMMARY, SERVERS)
        self.assertEqual(scored["profiles"]["baseline"], {"xkit": 100.0, "h2o": 50.0, "nginx": 25.0})
        self.assertNotIn("pipelined", scored["profiles"])

    def test_paced_profiles_score_rate_cpu_and_tails(self):
        scored = arena_score.score(SUMMARY, SERVERS)["profiles"]["latency-1m"]
        self.assertAlmostEqual(scored["xkit"], 100.0)
        # rateFactor 0.5 × (0.60 × 0.5 + 0.25 × (1 − 1/3) + 0.15 × 1)
        self.assertAlmostEqual(scored["go"], 100 * 0.5 * (0.30 + 0.25 * 2 / 3 + 0.15))
        self.assertEqual(set(scored), {"xkit", "go"})

    def test_the_composite_sums_every_scored_profile_and_missing_ones_score_zero(self):
        composite = arena_score.score(SUMMARY, SERVERS)["composite"]
        self.assertAlmostEqual(composite["xkit"], 200.0)
        self.assertAlmostEqual(composite["go"], 30.833333333333336)
        self.assertAlmostEqual(composite["h2o"], 50.0)
        self.assertAlmostEqual(composite["nginx"], 25.0)
        self.assertEqual(len(arena_score.PROFILES), 20)

    def test_a_latency_far_worse_than_the_best_floors_at_zero(self):
        self.assertEqual(arena_score.decade_score(2_000_000.0, 1000.0), 0.0)
        self.assertAlmostEqual(arena_score.decade_score(100_000.0, 1000.0), 1 / 3)

    def test_score_from_prints_the_table_of_a_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "report.json"
            path.write_text(json.dumps({"summary": SUMMARY}))
            args = build_parser().parse_args(["arena", "--score-from", str(path)])
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(args.run(args), 0)
        text = out.getvalue()
        self.assertIn("| baseline | req/s ÷ best | 100.0 | 0 | 50.0 | 25.0 |", text)
        self.assertIn("| latency-1m | CPU, p99, p99.9 at a fixed rate | 100.0 | 30.8 | 0 | 0 |", text)
        self.assertIn("| gateway-64 | not measured | 0 | 0 | 0 | 0 |", text)
        self.assertIn("| **composite** (of 2,000) | sum | **200.0** | **30.8** | **50.0** | **25.0** |", text)
        self.assertIn("latency-1m paced at 1,000,000 ÷ 64 = 15,625 req/s", text)

    def test_score_from_refuses_a_file_that_is_no_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "other.json"
            path.write_text("[1, 2]")
            args = build_parser().parse_args(["arena", "--score-from", str(path)])
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                arena.run(args)


if __name__ == "__main__":
    unittest.main()
