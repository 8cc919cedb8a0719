"""The markdown and JSON reports: environment table, summary, one table per section with the
reports' columns plus CPU µs/req, failures and missing servers said plainly, files in place."""

import json
import tempfile
import unittest
from pathlib import Path

import support
from xkbench import report, stats


def table_after(markdown, heading):
    """The markdown table that follows a heading (up to the next blank line after it)."""
    lines = markdown.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


class MarkdownTest(unittest.TestCase):
    def setUp(self):
        self.report = support.sample_report()
        self.markdown = report.render_markdown(self.report, "2026-11-22/")

    def test_environment_comes_first_as_a_table(self):
        self.assertLess(self.markdown.index("## Test Environment"), self.markdown.index("## Summary"))
        self.assertIn("| CPU | AMD EPYC (2 cores online) |", self.markdown)
        self.assertIn("| Go | go1.26.8 linux/amd64 |", self.markdown)

    def test_section_table_has_the_reports_columns_and_cpu_per_request(self):
        table = table_after(self.markdown, "## HTTP/1.1, with wrk")
        self.assertEqual(
            table[0],
            "| Connections | xKit Req/s | Go Req/s | nginx Req/s | xKit Latency mean / p50 / p99 "
            "| Go Latency mean / p50 / p99 | nginx Latency mean / p50 / p99 | Δ | xKit CPU µs/req | Go CPU µs/req "
            "| nginx CPU µs/req | Req/s spread |",
        )
        self.assertEqual(
            table[2],
            "| 50 | 100,000 | 50,000 | 90,000 | 1.50 / 1.20 / 6.00 ms | 1.50 / 1.20 / 6.00 ms "
            "| 1.50 / 1.20 / 6.00 ms "
            "| +100% | 8.00 | 20.0 | 10.0 | xKit 20% · Go 20% · nginx 20% |",
        )

    def test_latency_figures_the_runs_lack_show_as_dashes(self):
        runs = [{**support.run(1000, 5.0), "latency_p50_ms": None, "latency_p99_ms": None}]
        self.assertEqual(report.latency_cell(stats.summarize(runs)), "1.50 / – / – ms")

    def test_a_failed_case_shows_failed_and_why_never_a_number(self):
        table = table_after(self.markdown, "## HTTP/1.1, with wrk")
        self.assertTrue(table[3].startswith("| 500 | 120,000 | failed | 95,000 | 1.50 / 1.20 / 6.00 ms | – |"))
        self.assertIn("| n/a |", table[3])  # no Δ against a failed Go
        self.assertIn("- Go, connections 500: **failed**: wrk Socket errors: connect 0, read 3", self.markdown)

    def test_body_sizes_label_rows_and_unserved_cases_are_n_a(self):
        table = table_after(self.markdown, "### POST /echo by body size")
        self.assertTrue(table[0].startswith("| Body size | xKit Req/s |"))
        self.assertTrue(table[2].startswith("| 1 KiB | 80,000 | 40,000 | n/a |"))
        self.assertTrue(table[3].startswith("| 64 KiB | 15,000 | 4,000 | n/a |"))
        self.assertIn("- nginx: n/a: nginx does not serve POST /echo here", self.markdown)

    def test_a_server_not_built_is_said_once_per_section(self):
        https = self.markdown.split("## HTTPS/2 (h2 by ALPN), with h2load", 1)[1]
        table = table_after(https, "### GET /ping")
        self.assertTrue(table[2].startswith("| 50 | not built | 20,000 | 40,000 | – |"))
        ping_notes = https.split("### POST")[0]
        self.assertEqual(ping_notes.count("xKit: not built: build/bench/https_bench_server not built"), 1)

    def test_charts_are_linked_with_the_prefix(self):
        self.assertIn("](2026-11-22/http1-ping.svg)", self.markdown)
        self.assertIn("](http1-ping.svg)", report.render_markdown(self.report))

    def test_summary_has_median_ratios_per_section(self):
        summary = table_after(self.markdown, "## Summary")
        self.assertEqual(summary[0], "| Section | xKit Req/s ÷ Go | xKit CPU µs/req ÷ Go | Cells ok | Failed |")
        # ping: only the 50-connection row has both; post: 2.00× and 3.75× (median 2.875)
        self.assertEqual(summary[2], "| HTTP/1.1: GET /ping by connections | 2.00× | 0.40× | 5 | 1 |")
        self.assertIn(
            "| HTTP/1.1: POST /echo by body size, 100 connections | 2.88× (2.00–3.75×) | 0.26× (0.22–0.30×) | 4 | 0 |",
            summary,
        )
        self.assertIn("| HTTPS/2: GET /ping by connections | n/a | n/a | 4 | 0 |", summary)


class WriteReportTest(unittest.TestCase):
    def test_latest_and_dated_copies_with_one_chart_per_section(self):
        sample = support.sample_report()
        with tempfile.TemporaryDirectory() as out:
            out = Path(out)
            report.write_report(sample, out)
            for name in ("latest.md", "latest.json", "suite/2026-11-22.md", "suite/2026-11-22.json"):
                self.assertTrue((out / name).is_file(), name)
            for section in sample["sections"]:
                self.assertTrue((out / "suite" / "2026-11-22" / section["chart"]).is_file())
            latest = json.loads((out / "latest.json").read_text())
            self.assertEqual(latest, json.loads((out / "suite/2026-11-22.json").read_text()))
            self.assertIn("](suite/2026-11-22/http1-ping.svg)", (out / "latest.md").read_text())
            self.assertIn("](2026-11-22/http1-ping.svg)", (out / "suite/2026-11-22.md").read_text())

    def test_a_second_run_on_the_same_day_keeps_the_first(self):
        sample = support.sample_report()
        with tempfile.TemporaryDirectory() as out:
            out = Path(out)
            report.write_report(sample, out)
            report.write_report(sample, out)
            self.assertTrue((out / "suite/2026-11-22.md").is_file())
            self.assertTrue((out / "suite/2026-11-22-2.json").is_file())
            self.assertTrue((out / "suite/2026-11-22-2" / "http1-ping.svg").is_file())
            self.assertIn("](suite/2026-11-22-2/http1-ping.svg)", (out / "latest.md").read_text())

    def test_json_keeps_every_run_and_the_delta(self):
        sample = support.sample_report()
        with tempfile.TemporaryDirectory() as out:
            report.write_report(sample, out)
            data = json.loads((Path(out) / "latest.json").read_text())
        self.assertEqual(data["schema"], "xkit-bench/1")
        for key in ("mode", "date", "settings", "environment", "servers", "sections", "summary"):
            self.assertIn(key, data)
        row = data["sections"][0]["rows"][0]
        self.assertEqual(len(row["results"]["xkit"]["runs"]), 3)
        self.assertAlmostEqual(row["delta_req_per_s"], 1.0)
        self.assertEqual(data["sections"][0]["rows"][1]["results"]["go"]["status"], "failed")
        self.assertIsNone(data["sections"][0]["rows"][1]["delta_req_per_s"])


if __name__ == "__main__":
    unittest.main()
