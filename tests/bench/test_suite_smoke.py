"""One short run of `python3 bench/xkbench suite` against the servers of this build (under `make test`,
the sanitizer build): GET /ping for every protocol, 10 connections, one 1-s run without
warm-up, xKit against Go where Go is installed; then the report's structure."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

import support

XKBENCH = support.REPO_ROOT / "bench" / "xkbench"
BUILD_DIR = os.environ.get("XK_BUILD_DIR")
HTTPS_SERVER = os.environ.get("XK_HTTPS_SERVER")  # set by CMake only where the target exists
GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
TOOLS = ("wrk", "h2load", "taskset", "openssl")
SECTIONS = ["http1-ping", "h2c-ping", "https1-ping", "https2-ping", "pipeline-ping"]


@unittest.skipUnless(BUILD_DIR, "XK_BUILD_DIR is not set: run this through ctest")
@unittest.skipUnless(
    all(shutil.which(tool) for tool in TOOLS), "needs " + ", ".join(TOOLS) + " (make deps installs them)"
)
class SuiteSmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not GO:
            print("Go is not installed: the smoke run measures xKit alone", file=sys.stderr)
        cls.out = Path(tempfile.mkdtemp(prefix="xkbench_suite_smoke-"))
        argv = [
            sys.executable,
            str(XKBENCH),
            "suite",
            "--build-dir",
            BUILD_DIR,
            "--out-dir",
            str(cls.out),
            "--cases",
            "ping",
            "--connections",
            "10",
            "--duration",
            "1",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--peers",
            "go" if GO else "none",
            "--first-port",
            "26000",
        ]
        cls.done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        latest = cls.out / "latest.json"
        cls.report = json.loads(latest.read_text()) if latest.is_file() else None
        cls.markdown = (cls.out / "latest.md").read_text() if cls.report else ""

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.done.returncode, 0, self.done.stderr[-3000:])
        self.assertIsNotNone(self.report, "no latest.json written")

    def results(self, server):
        return {section["id"]: section["rows"][0]["results"][server] for section in self.report["sections"]}

    def test_every_protocol_has_a_section_with_one_row_and_a_chart(self):
        self.assertEqual([section["id"] for section in self.report["sections"]], SECTIONS)
        charts = self.out / "suite" / self.report["date"]
        for section in self.report["sections"]:
            self.assertEqual([row["connections"] for row in section["rows"]], [10])
            ET.parse(charts / section["chart"])  # well-formed SVG
            self.assertIn(f"](suite/{self.report['date']}/{section['chart']})", self.markdown)
        self.assertTrue(charts.with_suffix(".md").is_file())
        self.assertEqual(json.loads(charts.with_suffix(".json").read_text()), self.report)

    def test_the_report_names_the_command_that_made_it(self):
        self.assertTrue(self.report["command"].startswith("python3 bench/xkbench suite --build-dir"))

    def test_json_has_settings_environment_and_summary(self):
        for key in (
            "schema",
            "mode",
            "date",
            "elapsed_s",
            "command",
            "settings",
            "environment",
            "servers",
            "notes",
            "sections",
            "summary",
        ):
            self.assertIn(key, self.report)
        for key in (
            "CPU",
            "Server cores",
            "Client cores",
            "Memory",
            "Kernel",
            "Compiler",
            "OpenSSL",
            "wrk",
            "h2load",
            "Go",
        ):
            self.assertIn(key, self.report["environment"])
        # xKit's HTTP/2 is its own: nghttp2 is only h2load's library (and the tests' HPACK oracle).
        naming = [key for key, value in self.report["environment"].items() if "nghttp2" in f"{key} {value}"]
        self.assertEqual(naming, ["h2load"])
        self.assertEqual(self.report["settings"]["runs"], 1)
        self.assertEqual([entry["section"] for entry in self.report["summary"]], SECTIONS)

    def test_markdown_has_environment_summary_and_section_tables(self):
        for heading in (
            "## Test Environment",
            "## Summary",
            "## HTTP/1.1, with wrk",
            "## h2c (cleartext HTTP/2, prior knowledge), with h2load",
            "## HTTPS/1.1, with wrk",
            "## HTTPS/2 (h2 by ALPN), with h2load",
            "### GET /ping by connections",
        ):
            self.assertIn(heading, self.markdown)
        header = (
            "| Connections | xKit Req/s | Go Req/s | xKit Latency mean / p50 / p99 | Go Latency mean / p50 / p99 | Δ |"
            if GO
            else "| Connections | xKit Req/s | xKit Latency mean / p50 / p99 | xKit CPU µs/req |"
        )
        self.assertEqual(self.markdown.count(header), len(SECTIONS))

    def test_xkit_is_measured_over_every_protocol(self):
        https_built = HTTPS_SERVER or os.access(Path(BUILD_DIR, "bench", "https_bench_server"), os.X_OK)
        for section, result in self.results("xkit").items():
            with self.subTest(section):
                if section.startswith("https") and not https_built:
                    self.assertEqual(result["status"], "not built")
                    continue
                self.assertEqual(result["status"], "ok", result.get("error"))
                self.assertGreater(result["req_per_s"]["median"], 0)
                self.assertGreater(result["cpu_us_per_request"]["median"], 0)
                self.assert_latency_percentiles(section, result)

    def assert_latency_percentiles(self, section, result):
        """wrk's from --latency, h2load's from its logged run: 0 < p50 <= p99, each in the JSON.
        Pipelined, wrk's distribution may not be whole, and then there are none (parsing.wrk_percentiles)."""
        if section.startswith("pipeline") and result["latency_p50_ms"] is None:
            self.assertIsNone(result["latency_p99_ms"])
            return
        p50, p99 = result["latency_p50_ms"]["median"], result["latency_p99_ms"]["median"]
        self.assertGreater(p50, 0)
        self.assertLessEqual(p50, p99)

    @unittest.skipUnless(GO, "Go is not installed (not on PATH, not /usr/local/go/bin/go)")
    def test_go_is_measured_over_every_protocol(self):
        for section, result in self.results("go").items():
            with self.subTest(section):
                self.assertEqual(result["status"], "ok", result.get("error"))
                self.assertGreater(result["cpu_us_per_request"]["median"], 0)
                self.assert_latency_percentiles(section, result)


if __name__ == "__main__":
    unittest.main()
